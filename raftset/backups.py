"""Backups, the pure part: when one is due, what its objects are called, which ones retention
drops, why one failed, and what status and condition the last results give.

The shells (sidecar/raftset/sidecar/io/snapshots.py moves the bytes, the sidecar's backuper decides when) call
these functions with plain data; nothing here does I/O, so every rule is unit-tested.
Cron expressions are parsed by croniter (the same five-field syntax as a Kubernetes CronJob),
imported at the first schedule read: a sidecar with neither a backup nor a defragmentation
schedule (the default) never loads it and its dateutil (0.6 MiB of RSS).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from raftset import fields, records
from raftset.times import parse_rfc3339, rfc3339

LATEST = "latest"
SNAPSHOT_SUFFIX = ".db"
MANIFEST_SUFFIX = ".json"
LATEST_NAME = "latest.json"
_STAMP = "%Y%m%dT%H%M%SZ"
_KEY = re.compile(r"snapshot-(?P<stamp>\d{8}T\d{6}Z)-r(?P<rev>\d+)\.db$")
_AGE = re.compile(r"^(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?$")
# An incomplete upload younger than this may still be a live taker's (a large snapshot over a
# slow link, a leader that lost leadership mid-upload): below it a sweep could abort real work.
ABORT_UPLOADS_FLOOR = timedelta(hours=1)

# Reasons of a failed backup or restore, shown in status.backup, BackupReady and Events.
CREDENTIALS_REJECTED = "CredentialsRejected"
BUCKET_MISSING = "BucketMissing"
ENDPOINT_UNREACHABLE = "EndpointUnreachable"
DESTINATION_FULL = "DestinationFull"
SNAPSHOT_FAILED = "SnapshotFailed"
UPLOAD_FAILED = "UploadFailed"
CHECKSUM_MISMATCH = "ChecksumMismatch"
BACKUP_MISSING = "BackupMissing"
RESTORE_FAILED = "RestoreFailed"
INVALID_CONFIG = "InvalidBackupConfig"

# S3 error codes (and botocore's connection errors by class name) -> our reason.
_S3_CODES: dict[str, str] = {
    "InvalidAccessKeyId": CREDENTIALS_REJECTED,
    "SignatureDoesNotMatch": CREDENTIALS_REJECTED,
    "AccessDenied": CREDENTIALS_REJECTED,
    "InvalidToken": CREDENTIALS_REJECTED,
    "NoSuchBucket": BUCKET_MISSING,
    "NoSuchKey": BACKUP_MISSING,
    "404": BACKUP_MISSING,
    "NotFound": BACKUP_MISSING,
    "EndpointConnectionError": ENDPOINT_UNREACHABLE,
    "ConnectTimeoutError": ENDPOINT_UNREACHABLE,
    "ReadTimeoutError": ENDPOINT_UNREACHABLE,
    "ConnectionClosedError": ENDPOINT_UNREACHABLE,
    "SSLError": ENDPOINT_UNREACHABLE,
    "ENOSPC": DESTINATION_FULL,
    "EntityTooSmall": UPLOAD_FAILED,
    "NoSuchUpload": UPLOAD_FAILED,
}


def failure_reason(code: str, default: str = UPLOAD_FAILED) -> str:
    """The reason for a store error code (S3's `Error.Code`, an errno name, an exception class)."""
    return _S3_CODES.get(code, default)


class ConfigError(ValueError):
    """spec.backup or spec.bootstrap.fromBackup cannot be used as written."""


# ---- schedule


def schedule_error(schedule: str) -> str | None:
    """Why `schedule` is not a five-field cron expression, or None if it is."""
    if not schedule.startswith("@") and len(schedule.split()) != 5:
        return f"schedule {schedule!r} must have five fields (minute hour day-of-month month day-of-week)"
    from croniter import croniter  # noqa: PLC0415 - only with a schedule (module docstring)

    if not croniter.is_valid(schedule):
        return f"schedule {schedule!r} is not a valid cron expression"
    return None


def next_run(schedule: str, after: datetime) -> datetime:
    """The first scheduled time strictly after `after` (UTC)."""
    error = schedule_error(schedule)
    if error:
        raise ConfigError(error)
    from croniter import croniter  # noqa: PLC0415 - only with a schedule (module docstring)

    return croniter(schedule, after.astimezone(timezone.utc)).get_next(datetime)


def is_due(schedule: str, since: datetime, now: datetime) -> bool:
    """A scheduled backup is due when a scheduled time passed after `since`.

    `since` is the last scheduled run (or, before the first one, when the schedule was
    first seen): missed runs collapse into one backup, never a burst.
    """
    return next_run(schedule, since) <= now


# ---- retention


def parse_age(text: str) -> timedelta:
    """`7d`, `12h`, `1d12h`, `90m` -> timedelta; the CRD's pattern accepts the same."""
    match = _AGE.match(text.strip())
    if not text.strip() or not match:
        raise ConfigError(f"retention age {text!r} must look like 7d, 12h, 30m or 1d12h")
    days, hours, minutes = (int(match.group(g) or 0) for g in ("d", "h", "m"))
    age = timedelta(days=days, hours=hours, minutes=minutes)
    if age <= timedelta(0):
        raise ConfigError(f"retention age {text!r} must be positive")
    return age


@dataclass(frozen=True)
class Stored:
    """One published backup as the store lists it (its manifest exists)."""

    key: str
    taken: datetime
    revision: int


def expired(backups: Iterable[Stored], *, keep: int | None, max_age: timedelta | None, now: datetime,
            latest: str | None) -> list[str]:
    """Keys retention removes: beyond the newest `keep`, or older than `max_age`.

    The newest backup and the one "latest" names are never removed, whatever the
    settings say: retention must not leave nothing to restore from.
    """
    # Names carry whole seconds and an unpadded revision: two backups in one second order
    # by revision, never by name ("r118" sorts before "r72").
    ordered = sorted(backups, key=lambda b: (b.taken, b.revision, b.key), reverse=True)
    out: list[str] = []
    for index, backup in enumerate(ordered):
        if index == 0 or backup.key == latest:
            continue
        too_many = keep is not None and index >= keep
        too_old = max_age is not None and now - backup.taken > max_age
        if too_many or too_old:
            out.append(backup.key)
    return out


# ---- object names


def _clean_prefix(prefix: str) -> str:
    return "/".join(part for part in prefix.split("/") if part)


def cluster_prefix(prefix: str, namespace: str, cluster: str) -> str:
    """Every object of one cluster lives under `<prefix>/<namespace>/<cluster>/`."""
    return "/".join(p for p in (_clean_prefix(prefix), namespace, cluster) if p) + "/"


def snapshot_key(prefix: str, namespace: str, cluster: str, taken: datetime, revision: int) -> str:
    """Sortable by time; the revision is in the name so a listing says what each holds."""
    stamp = taken.astimezone(timezone.utc).strftime(_STAMP)
    return f"{cluster_prefix(prefix, namespace, cluster)}snapshot-{stamp}-r{revision}{SNAPSHOT_SUFFIX}"


def manifest_key(snapshot: str) -> str:
    """A snapshot is published by its manifest, written only after it was verified."""
    return snapshot + MANIFEST_SUFFIX


def latest_key(prefix: str, namespace: str, cluster: str) -> str:
    return cluster_prefix(prefix, namespace, cluster) + LATEST_NAME


def is_snapshot_name(name: str) -> bool:
    """Whether `name` (a key without its cluster prefix) is exactly a snapshot name we write."""
    return _KEY.fullmatch(name) is not None


def parse_snapshot_key(key: str) -> tuple[datetime, int] | None:
    """(time taken, revision) from a snapshot key we wrote; None for any other object."""
    match = _KEY.search(key)
    if not match:
        return None
    taken = datetime.strptime(match.group("stamp"), _STAMP).replace(tzinfo=timezone.utc)
    return taken, int(match.group("rev"))


def published(keys: Iterable[str]) -> list[Stored]:
    """The snapshots among listed keys that have a manifest: only those count as backups."""
    present = set(keys)
    out = []
    for key in present:
        parsed = parse_snapshot_key(key)
        if parsed is not None and manifest_key(key) in present:
            out.append(Stored(key, *parsed))
    return sorted(out, key=lambda s: (s.taken, s.revision, s.key))


# ---- manifests


@dataclass(frozen=True)
class Manifest:
    """What a published backup is: written next to it and, as "latest", once per cluster."""

    key: str
    sha256: str
    size: int
    revision: int
    taken: str  # RFC 3339
    engine: str
    cluster: str
    namespace: str
    # metadata.uid of the cluster object that took it: which incarnation of the name. Empty in
    # manifests written before it was recorded.
    cluster_uid: str = ""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        try:
            raw = json.loads(data)
            return cls(key=str(raw["key"]), sha256=str(raw["sha256"]), size=int(raw["size"]),
                       revision=int(raw["revision"]), taken=str(raw["taken"]), engine=str(raw["engine"]),
                       cluster=str(raw["cluster"]), namespace=str(raw["namespace"]),
                       cluster_uid=str(raw.get("cluster_uid") or ""))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"not a backup manifest: {exc}") from exc


def latest_stays(current: Manifest | None, candidate: Manifest) -> str | None:
    """Why `latest` keeps naming `current` (read from the store just now) instead of the verified
    `candidate`, or None to publish the candidate.

    `latest` only moves forward. Within one cluster, forward is a higher revision: a deposed
    leader's slower backup, finishing after the new leader's, holds an older revision and must not
    move `latest` back (the time taken does not order them: the two sidecars' clocks differ, and the
    slower one may have started later). A cluster deleted and created again under the same name (a
    different uid) counts revisions afresh, so between incarnations the later time taken wins; a
    manifest without a uid (written before uids were recorded) is compared by revision.
    """
    if current is None:
        return None
    if current.cluster_uid and candidate.cluster_uid and current.cluster_uid != candidate.cluster_uid:
        if _moment(candidate.taken) > _moment(current.taken):
            return None
        return (f"latest names {current.key} of another incarnation of the cluster (uid {current.cluster_uid}), "
                f"taken later than this backup ({current.taken}, not before {candidate.taken})")
    if candidate.revision > current.revision:
        return None
    return f"latest names {current.key} at revision {current.revision}, not older than revision {candidate.revision}"


def restore_manifest_key(source: str, prefix: str, namespace: str, cluster: str) -> str:
    """Where the manifest of `fromBackup` is: `latest` names the cluster's latest pointer,
    anything else is a snapshot key (its manifest beside it)."""
    if source == LATEST:
        return latest_key(prefix, namespace, cluster)
    if not source.endswith(SNAPSHOT_SUFFIX):
        raise ConfigError(f"fromBackup {source!r} must be 'latest' or a snapshot object key ending in .db")
    return manifest_key(source)


# ---- results and status


def _moment(text: str) -> datetime:
    """When an attempt was; an unreadable time (a hand-edited record) counts as long ago."""
    return parse_rfc3339(text) or datetime.min.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class Failure:
    time: str
    reason: str
    message: str


@dataclass(frozen=True)
class Record:
    """What the actor publishes after every attempt (JSON in the backup Lease's annotation).

    `since` anchors the schedule: the last scheduled run, or when the schedule was first seen.
    `request` is the last on-demand request served, so that one request is one backup.
    `aborted_uploads` counts the abandoned incomplete uploads the actors aborted, ever.
    `failures` counts the failed attempts, ever: only the last one's details are kept, and the
    operator tells from the count how many failed since it last looked (however quickly).
    """

    since: str = ""
    request: str = ""
    last_success: Manifest | None = None
    last_failure: Failure | None = None
    aborted_uploads: int = 0
    failures: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> Record:
        """An absent or unreadable record is an empty one: the next backup writes a good one."""
        return records.parse(text, lambda raw: cls(
            since=str(raw.get("since") or ""),
            request=str(raw.get("request") or ""),
            last_success=Manifest(**raw["last_success"]) if raw.get("last_success") else None,
            last_failure=Failure(**raw["last_failure"]) if raw.get("last_failure") else None,
            aborted_uploads=max(0, int(raw.get("aborted_uploads") or 0)),
            failures=max(0, int(raw.get("failures") or 0)),
        )) or cls()


@dataclass(frozen=True)
class Decision:
    """Whether the leader's sidecar takes a backup now, and the record's bookkeeping either way."""

    take: bool
    trigger: str  # "on-demand" | "scheduled" | ""
    record: Record


def decide(schedule: str | None, request: str | None, record: Record, now: datetime) -> Decision:
    """One on-demand request (the id the operator wrote on the backup Lease) is one backup: it is
    taken while `record.request` is another id, whichever sidecar leads then. A schedule is anchored
    at `record.since` (set when first seen), so a new leader neither repeats nor skips a run."""
    base = replace(record, request=record.request if request else "")
    if request and request != record.request:
        return Decision(True, "on-demand", replace(base, request=request))
    if not schedule:
        return Decision(False, "", replace(base, since=""))
    if not base.since:
        return Decision(False, "", replace(base, since=rfc3339(now)))
    since = parse_rfc3339(base.since)
    try:
        due = since is not None and is_due(schedule, since, now)
    except ValueError:  # a schedule croniter cannot read
        since = None
    if since is None:  # an unreadable anchor or schedule: start the schedule again from now
        return Decision(False, "", replace(base, since=rfc3339(now)))
    if due:
        return Decision(True, "scheduled", replace(base, since=rfc3339(now)))
    return Decision(False, "", base)


@dataclass(frozen=True)
class Intake:
    """What the operator does with a backup-now annotation on the cluster object.

    `record`: the request id to write on the backup Lease first (None: nothing to write);
    `clear`: remove the annotation from the cluster object (only after that write succeeded).
    """

    record: str | None
    clear: bool


def request_id(now: datetime) -> str:
    """A new on-demand request's id: the moment the operator took it, to the microsecond."""
    return now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def intake(asked: str | None, configured: bool, pending: str | None, served: str, now: datetime) -> Intake:
    """Move a backup-now annotation (`asked`) to the backup Lease as a request id.

    A request still pending there (written, not yet served: the operator may have stopped
    between writing it and removing the annotation) takes this annotation too: one backup after
    both asks serves both, and a restarted operator does not ask twice. Without spec.backup
    the annotation stays where the user put it, as before, and is served once it is set.
    """
    if asked is None or not configured:
        return Intake(None, False)
    if pending and pending != served:
        return Intake(None, True)
    return Intake(request_id(now), True)


@dataclass(frozen=True)
class Destination:
    """Where one cluster's backups are, with the paths the pod mounts its credentials at."""

    prefix: str
    endpoint: str = ""  # S3; empty for a volume
    bucket: str = ""
    region: str = "us-east-1"
    credentials_dir: str = ""  # files accessKeyID and secretAccessKey
    ca_file: str = ""
    path: str = ""  # a mounted PVC

    @property
    def is_s3(self) -> bool:
        return bool(self.endpoint)


def destination_of(raw: Mapping[str, Any], *, credentials_dir: str, ca_dir: str, volume: str) -> Destination:
    """spec.backup's (or fromBackup's) s3/pvc as the paths inside the pod say it."""
    s3 = raw.get("s3")
    if s3:
        ca = s3.get("caSecret") or {}
        return Destination(
            prefix=str(s3.get("prefix") or ""), endpoint=str(s3["endpoint"]).rstrip("/"), bucket=str(s3["bucket"]),
            region=str(s3.get("region") or "us-east-1"), credentials_dir=credentials_dir,
            ca_file=f"{ca_dir}/{ca.get('key') or 'ca.crt'}" if ca.get("name") else "")
    pvc = raw.get("pvc")
    if pvc:
        return Destination(prefix=str(pvc.get("prefix") or ""), path=volume)
    raise ConfigError("no destination: set s3 or pvc")


def mounts(raw: Mapping[str, Any] | None) -> str:
    """What a pod must mount for a destination (spec.backup), as one canonical string: the
    credentials Secret and CA Secret of `s3`, or the claim of `pvc`; empty for none.

    The operator renders it into the sidecar's environment beside the volumes it mounts, so the
    pod template changes, and the members roll, exactly when the volumes change: never for a new
    schedule, bucket or endpoint, which the sidecar reads from the cluster object each round.
    """
    if not raw:
        return ""
    s3, pvc = raw.get("s3"), raw.get("pvc")
    if s3:
        ca = s3.get("caSecret") or {}
        text = f"s3 credentials={s3.get('credentialsSecret') or ''}"
        return text + (f" ca={ca['name']}/{ca.get('key') or 'ca.crt'}" if ca.get("name") else "")
    if pvc:
        return f"pvc claim={pvc.get('claimName') or ''}"
    return ""


def unmounted(raw: Mapping[str, Any], mounted: str) -> str | None:
    """Why this pod cannot take a backup to `raw` (spec.backup as read now) yet, or None.

    A pod's volumes are fixed when it is created: after spec.backup is set or its Secret or claim
    changed, the members still running on the older template do not see the new credentials
    until the operator's roll reaches them (the leader last). Attempting from such a pod would
    report CredentialsRejected for credentials that are fine, and spend the request; waiting
    keeps the request (and a due schedule) for the first leader whose pod mounts them.
    """
    wanted = mounts(raw)
    if wanted == mounted:
        return None
    return (f"this pod mounts {mounted or 'no backup destination'}, spec.backup needs {wanted}: "
            f"waiting for the roll onto the new pod template")


def succeeded(record: Record, manifest: Manifest) -> Record:
    return replace(record, last_success=manifest)


def failed(record: Record, when: datetime, reason: str, message: str) -> Record:
    return replace(record, last_failure=Failure(rfc3339(when), reason, message[:500]), failures=record.failures + 1)


def aborted(record: Record, count: int) -> Record:
    """`count` more abandoned uploads aborted."""
    return replace(record, aborted_uploads=record.aborted_uploads + count)


def status_of(record: Record) -> dict[str, Any]:
    """`status.backup`: the last success and the last failure, as a user reads them."""
    out: dict[str, Any] = {}
    if record.last_success is not None:
        s = record.last_success
        out["lastSuccess"] = {"time": s.taken, "revision": s.revision, "size": s.size, "key": s.key,
                              "sha256": s.sha256}
    if record.last_failure is not None:
        f = record.last_failure
        out["lastFailure"] = {"time": f.time, "reason": f.reason, "message": f.message}
    if record.aborted_uploads:
        out["abortedUploads"] = record.aborted_uploads
    if record.failures:
        out["failures"] = record.failures
    return out


def condition(record: Record | None, configured: bool) -> tuple[str, str, str]:
    """(status, reason, message) of BackupReady.

    True while the newest attempt succeeded; False with the failure's reason once a later
    attempt failed; Unknown before the first attempt.
    """
    if not configured:
        return "Unknown", "NotConfigured", "spec.backup is not set"
    if record is None or (record.last_success is None and record.last_failure is None):
        return "Unknown", "NoBackupYet", "no backup has been attempted yet"
    success, failure = record.last_success, record.last_failure
    if failure is not None and (success is None or _moment(failure.time) >= _moment(success.taken)):
        return "False", failure.reason, failure.message
    assert success is not None
    return "True", "BackupSucceeded", f"{success.key} at revision {success.revision} ({success.size} bytes)"


def settings_error(spec: Mapping[str, Any]) -> str | None:
    """What makes `spec.backup` unusable beyond what the CRD checks, or None."""
    schedule = spec.get("schedule")
    if schedule:
        error = schedule_error(str(schedule))
        if error:
            return error
    retention = spec.get("retention") or {}
    try:
        if retention.get("maxAge"):
            parse_age(str(retention["maxAge"]))
        abort_uploads_after(spec)
    except ConfigError as exc:
        return str(exc)
    destination = spec.get("s3"), spec.get("pvc")
    if sum(d is not None for d in destination) != 1:
        return "spec.backup needs exactly one destination: s3 or pvc"
    return None


def retention_of(spec: Mapping[str, Any]) -> tuple[int | None, timedelta | None]:
    retention = spec.get("retention") or {}
    keep = retention.get("keep")
    age = retention.get("maxAge")
    return (int(keep) if keep is not None else None, parse_age(str(age)) if age else None)


def abort_uploads_after(spec: Mapping[str, Any]) -> timedelta:
    """retention.abortIncompleteUploadsAfter (default 24h): how old an incomplete upload must be
    before a sweep aborts it; below ABORT_UPLOADS_FLOOR it is refused."""
    path = "backup.retention.abortIncompleteUploadsAfter"
    text = str((spec.get("retention") or {}).get("abortIncompleteUploadsAfter") or fields.default(path))
    age = parse_age(text)
    if age < ABORT_UPLOADS_FLOOR:
        raise ConfigError(f"retention.abortIncompleteUploadsAfter {text!r} must be at least 1h: "
                          "a younger incomplete upload may still be a running backup's")
    return age
