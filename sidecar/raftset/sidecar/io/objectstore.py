"""Where backups are kept: an S3-compatible bucket (boto3) or a directory on a PVC.

Both stores offer the same few blocking calls; async callers run them in a worker thread
(`asyncio.to_thread`), so one backup streams through at most one part buffer at a time.
Every failure becomes a `StoreError` whose `reason` is one of raftset.backups' reasons, so
status, conditions and Events say *why* (credentials, bucket, endpoint, full volume) in
the same words for both stores. docs/backups.md says why boto3.
"""

from __future__ import annotations

import errno
import hashlib
import io
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from raftset import backups, contract
from raftset.sidecar.pure.uploads import Incomplete

log = logging.getLogger(__name__)

# S3's smallest part (except the last) is 5 MiB; 8 MiB parts keep a 256 MiB snapshot at 32 parts.
PART_SIZE = 8 * 1024 * 1024
READ_CHUNK = 1024 * 1024
PARTIAL_SUFFIX = ".partial"


class StoreError(Exception):
    """A store refused or could not be reached; `reason` is a raftset.backups reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


def still() -> None:
    """No one to tell about progress."""


class Upload(Protocol):
    upload_id: str  # what the store's listing of incomplete uploads calls this one

    # `progress` is called as the part's bytes go out: a part over a slow link is moving, not stuck.
    def part(self, data: bytes, progress: Callable[[], None] = still) -> None: ...
    def complete(self) -> None: ...
    def abort(self) -> None: ...


class ObjectStore(Protocol):
    """The calls a backup and a restore need, on either kind of store."""

    def begin(self, key: str) -> Upload: ...
    def read(self, key: str) -> Iterator[bytes]: ...
    def get(self, key: str) -> bytes | None: ...
    def put(self, key: str, data: bytes) -> None: ...
    def get_tagged(self, key: str) -> tuple[bytes, str] | None: ...
    def put_if(self, key: str, data: bytes, tag: str | None) -> bool: ...
    def keys(self, prefix: str) -> list[str]: ...
    def delete(self, key: str) -> None: ...
    def incomplete(self, prefix: str) -> list[Incomplete]: ...
    def abort_incomplete(self, upload: Incomplete) -> bool: ...


@dataclass(frozen=True)
class S3Settings:
    endpoint: str
    bucket: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    ca_bundle: str | None = None  # a PEM file; None = the system's trust store


def _get(store: ObjectStore, key: str) -> bytes | None:
    """A small object (a manifest, the latest pointer) whole; None when it is not there."""
    try:
        return b"".join(store.read(key))
    except StoreError as exc:
        if exc.reason == backups.BACKUP_MISSING:
            return None
        raise


# ---- S3


def _s3_error(exc: BaseException) -> StoreError:
    """botocore's exceptions -> our reason (a ClientError by its S3 code, others by class)."""
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        return StoreError(backups.failure_reason(code), f"{code}: {error.get('Message') or exc}")
    name = type(exc).__name__
    if name == "NoCredentialsError":
        return StoreError(backups.CREDENTIALS_REJECTED, str(exc))
    return StoreError(backups.failure_reason(name, backups.ENDPOINT_UNREACHABLE), f"{name}: {exc}")


class _S3Upload:
    def __init__(self, store: S3Store, key: str) -> None:
        self.store, self.key = store, key
        self.upload_id = store.call(lambda c: c.create_multipart_upload(Bucket=store.bucket, Key=key))["UploadId"]
        self.parts: list[dict[str, Any]] = []

    def part(self, data: bytes, progress: Callable[[], None] = still) -> None:
        number = len(self.parts) + 1
        answer = self.store.call(lambda c: c.upload_part(
            Bucket=self.store.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=number,
            Body=_ReportingBody(data, progress)))
        self.parts.append({"PartNumber": number, "ETag": answer["ETag"]})

    def complete(self) -> None:
        self.store.call(lambda c: c.complete_multipart_upload(
            Bucket=self.store.bucket, Key=self.key, UploadId=self.upload_id,
            MultipartUpload={"Parts": self.parts}))

    def abort(self) -> None:
        """Best effort: a store that refuses here keeps an orphan upload, never a published object."""
        try:
            self.store.call(lambda c: c.abort_multipart_upload(
                Bucket=self.store.bucket, Key=self.key, UploadId=self.upload_id))
        except StoreError:
            pass


class _ReportingBody(io.BytesIO):
    """A part's body that calls `progress` for each block the HTTP connection reads to send."""

    def __init__(self, data: bytes, progress: Callable[[], None]) -> None:
        super().__init__(data)
        self._progress = progress

    def read(self, size: int | None = -1) -> bytes:
        block = super().read(size)
        self._progress()
        return block


class S3Store:
    """A bucket on any S3-compatible endpoint, path-style (no wildcard DNS needed)."""

    def __init__(self, settings: S3Settings, *, connect_timeout: float = 5.0, read_timeout: float = 60.0) -> None:
        import boto3
        from botocore.config import Config

        self.bucket = settings.bucket
        self.client = boto3.session.Session().client(
            "s3",
            endpoint_url=settings.endpoint,
            aws_access_key_id=settings.access_key,
            aws_secret_access_key=settings.secret_key,
            region_name=settings.region,
            verify=settings.ca_bundle or True,
            config=Config(
                s3={"addressing_style": "path"},
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                retries={"max_attempts": 3, "mode": "standard"},
                # Integrity is our sha256 over the whole snapshot, checked after upload;
                # the newer default CRC trailers are not served by every S3-compatible store.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )

    def call(self, fn: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(self.client)
        except (ClientError, BotoCoreError) as exc:
            raise _s3_error(exc) from exc

    def begin(self, key: str) -> Upload:
        return _S3Upload(self, key)

    def read(self, key: str) -> Iterator[bytes]:
        body = self.call(lambda c: c.get_object(Bucket=self.bucket, Key=key))["Body"]
        from botocore.exceptions import BotoCoreError

        try:
            yield from body.iter_chunks(READ_CHUNK)
        except BotoCoreError as exc:
            raise _s3_error(exc) from exc
        finally:
            body.close()

    def get(self, key: str) -> bytes | None:
        return _get(self, key)

    def put(self, key: str, data: bytes) -> None:
        self.call(lambda c: c.put_object(Bucket=self.bucket, Key=key, Body=data))

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        """A small object whole and its ETag; None when it is not there."""
        from botocore.exceptions import BotoCoreError

        try:
            answer = self.call(lambda c: c.get_object(Bucket=self.bucket, Key=key))
        except StoreError as exc:
            if exc.reason == backups.BACKUP_MISSING:
                return None
            raise
        body = answer["Body"]
        try:
            return body.read(), str(answer["ETag"])
        except BotoCoreError as exc:
            raise _s3_error(exc) from exc
        finally:
            body.close()

    def put_if(self, key: str, data: bytes, tag: str | None) -> bool:
        """PutObject only while the object still has ETag `tag` (If-Match), or is still absent for
        None (If-None-Match: *); False when it changed or appeared meanwhile.

        A store that answers NotImplemented to the condition gets a plain PutObject: the caller's
        read just before is then all the protection (docs/backups.md says what window that leaves).
        """
        from botocore.exceptions import BotoCoreError, ClientError

        condition = {"IfMatch": tag} if tag is not None else {"IfNoneMatch": "*"}
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, **condition)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code") or "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            # 412: the ETag differs (or the object exists); 409: a concurrent conditional write;
            # NoSuchKey: If-Match on an object deleted since it was read.
            if status in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"):
                return False
            if status == 501 or code == "NotImplemented":
                log.warning("%s does not take conditional writes (%s): writing %s after comparing only",
                            self.bucket, code, key)
                self.put(key, data)
                return True
            raise _s3_error(exc) from exc
        except BotoCoreError as exc:
            raise _s3_error(exc) from exc
        return True

    def keys(self, prefix: str) -> list[str]:
        out: list[str] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
            if token:
                kwargs["ContinuationToken"] = token
            page = self.call(lambda c: c.list_objects_v2(**kwargs))
            out += [obj["Key"] for obj in page.get("Contents", [])]
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return out

    def delete(self, key: str) -> None:
        self.call(lambda c: c.delete_object(Bucket=self.bucket, Key=key))

    def incomplete(self, prefix: str) -> list[Incomplete]:
        """ListMultipartUploads under `prefix`, every page."""
        out: list[Incomplete] = []
        markers: dict[str, str] = {}
        while True:
            page = self.call(lambda c: c.list_multipart_uploads(Bucket=self.bucket, Prefix=prefix, **markers))
            out += [Incomplete(u["Key"], u["UploadId"], u["Initiated"]) for u in page.get("Uploads", [])]
            markers = {"KeyMarker": page.get("NextKeyMarker") or "",
                       "UploadIdMarker": page.get("NextUploadIdMarker") or ""}
            if not page.get("IsTruncated") or not markers["KeyMarker"]:
                return out

    def abort_incomplete(self, upload: Incomplete) -> bool:
        """AbortMultipartUpload; False when the upload was already gone (completed or aborted)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=upload.key, UploadId=upload.upload_id)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchUpload":
                return False
            raise _s3_error(exc) from exc
        except BotoCoreError as exc:
            raise _s3_error(exc) from exc
        return True


# ---- a directory (a PVC mounted into the pod)


def _os_error(exc: OSError, what: str) -> StoreError:
    if exc.errno == errno.ENOSPC:
        return StoreError(backups.DESTINATION_FULL, f"{what}: no space left on the backup volume")
    if exc.errno == errno.ENOENT:
        return StoreError(backups.BACKUP_MISSING, f"{what}: {exc.strerror}")
    return StoreError(backups.UPLOAD_FAILED, f"{what}: {exc.strerror or exc}")


class _FileUpload:
    """Written under a temporary name and renamed when complete, like a multipart upload."""

    def __init__(self, path: Path, key: str) -> None:
        self.path = path
        self.partial = path.with_name(path.name + PARTIAL_SUFFIX)
        self.upload_id = key + PARTIAL_SUFFIX
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.fh = open(self.partial, "wb")
        except OSError as exc:
            raise _os_error(exc, str(path)) from exc

    def part(self, data: bytes, progress: Callable[[], None] = still) -> None:
        try:
            self.fh.write(data)
        except OSError as exc:
            raise _os_error(exc, str(self.path)) from exc
        progress()  # one block: a local write does not wait on a link

    def complete(self) -> None:
        try:
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
            os.replace(self.partial, self.path)
        except OSError as exc:
            raise _os_error(exc, str(self.path)) from exc

    def abort(self) -> None:
        try:
            self.fh.close()
        except OSError:
            pass
        self.partial.unlink(missing_ok=True)


class DirectoryStore:
    """Keys are paths below `root`; the same layout as in a bucket."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root.resolve() not in path.parents:
            raise StoreError(backups.INVALID_CONFIG, f"key {key!r} leaves the backup volume")
        return path

    def begin(self, key: str) -> Upload:
        return _FileUpload(self._path(key), key)

    def read(self, key: str) -> Iterator[bytes]:
        try:
            with open(self._path(key), "rb") as fh:
                while chunk := fh.read(READ_CHUNK):
                    yield chunk
        except OSError as exc:
            raise _os_error(exc, key) from exc

    def get(self, key: str) -> bytes | None:
        return _get(self, key)

    def put(self, key: str, data: bytes) -> None:
        upload = self.begin(key)
        try:
            upload.part(data)
            upload.complete()
        except StoreError:
            upload.abort()
            raise

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        """A small file whole, tagged with its sha256 (a volume has no ETags)."""
        data = self.get(key)
        return None if data is None else (data, hashlib.sha256(data).hexdigest())

    def put_if(self, key: str, data: bytes, tag: str | None) -> bool:
        """Read, compare, write: a volume offers no compare-and-swap. The window between the read and
        the rename is open only to another writer of the same claim at that moment (docs/backups.md)."""
        current = self.get_tagged(key)
        if (None if current is None else current[1]) != tag:
            return False
        self.put(key, data)
        return True

    def keys(self, prefix: str) -> list[str]:
        if not self.root.is_dir():
            return []
        out = []
        for path in self.root.rglob("*"):
            key = path.relative_to(self.root).as_posix()
            if path.is_file() and key.startswith(prefix) and not key.endswith(PARTIAL_SUFFIX):
                out.append(key)
        return sorted(out)

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise _os_error(exc, key) from exc

    def incomplete(self, prefix: str) -> list[Incomplete]:
        """The partial files under `prefix`; a file's last write stands for when it began, so a
        live (still growing) one never looks old."""
        if not self.root.is_dir():
            return []
        out = []
        for path in self.root.rglob("*" + PARTIAL_SUFFIX):
            name = path.relative_to(self.root).as_posix()
            if name.startswith(prefix):
                try:
                    written = datetime.fromtimestamp(path.lstat().st_mtime, timezone.utc)
                except OSError:  # completed or aborted since the listing
                    continue
                out.append(Incomplete(name.removesuffix(PARTIAL_SUFFIX), name, written))
        return sorted(out, key=lambda u: u.upload_id)

    def abort_incomplete(self, upload: Incomplete) -> bool:
        """Remove the partial file; False when it was already gone."""
        path = self.root / upload.upload_id
        if not upload.upload_id.endswith(PARTIAL_SUFFIX) or ".." in Path(upload.upload_id).parts:
            raise StoreError(backups.INVALID_CONFIG, f"{upload.upload_id!r} is not a partial file of the volume")
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise _os_error(exc, upload.upload_id) from exc
        return True


def open_store(destination: backups.Destination) -> ObjectStore:
    """The store a destination names; credentials are read from their mounted files each time,
    so a rotated Secret is used by the next backup without a restart."""
    if not destination.is_s3:
        return DirectoryStore(destination.path)
    keys = []
    for name in (contract.ACCESS_KEY_FILE, contract.SECRET_KEY_FILE):
        path = Path(destination.credentials_dir) / name
        try:
            keys.append(path.read_text().strip())
        except OSError as exc:
            raise StoreError(backups.CREDENTIALS_REJECTED,
                             f"credentials file {path} is missing: is the credentials Secret there, "
                             f"with keys {contract.ACCESS_KEY_FILE} and {contract.SECRET_KEY_FILE}?") from exc
    if destination.ca_file and not Path(destination.ca_file).is_file():
        raise StoreError(backups.INVALID_CONFIG, f"CA bundle {destination.ca_file} is missing: is the caSecret there?")
    return S3Store(S3Settings(endpoint=destination.endpoint, bucket=destination.bucket, access_key=keys[0],
                              secret_key=keys[1], region=destination.region,
                              ca_bundle=destination.ca_file or None))
