"""Backups, the imperative part: move snapshot bytes between a member and a store.

take(): Maintenance.Snapshot -> sha256 -> multipart upload -> read back and compare ->
manifest -> "latest". A backup is published (its manifest, then "latest") only once the
stored object's sha256 matches what the member sent; anything that fails before aborts the
upload or deletes the object, so "latest" never names a broken or partial snapshot. "latest"
only moves forward (publish_latest): it is read just before it is written, and written only
while it is still what was read.

fetch() + restore(): the manifest -> the object, sha256 checked while it streams to a file
-> the engine's restore command into a temporary directory, renamed into place only when
it succeeded: a member never starts from a half-restored data dir.

abort_abandoned(): the incomplete uploads a killed taker left (raftset.sidecar.pure.uploads decides which)
-> one abort each.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from raftset import backups, times
from raftset.backups import Manifest
from raftset.engines import Engine, RestoreConfig
from raftset.sidecar.io.etcdclient import EtcdClientError, MemberClient
from raftset.sidecar.io.objectstore import PART_SIZE, ObjectStore, StoreError, Upload, still
from raftset.sidecar.pure import uploads

log = logging.getLogger(__name__)

# A key nobody writes: a linearizable read of it on the member about to be snapshotted tells a
# revision that member has applied, so the snapshot taken next holds every write up to it. That
# lower bound is the manifest's revision (the snapshot stream's own header may overstate it).
REVISION_PROBE = "raftset.dev/backup-revision-probe"
# Reads of "latest" that another writer may overtake before one publication gives up.
LATEST_ATTEMPTS = 3


@dataclass(frozen=True)
class Target:
    """Which cluster's objects, under which prefix of the store."""

    prefix: str
    namespace: str
    cluster: str
    cluster_uid: str = ""  # the cluster object's metadata.uid, recorded in each manifest


async def take(client: MemberClient, store: ObjectStore, target: Target, engine: str, now: datetime,
               *, part_size: int = PART_SIZE, in_flight: set[str] | None = None,
               progress: Callable[[], None] = still) -> Manifest:
    """One backup of the member `client` talks to; raises StoreError with the reason on failure.

    While its upload is open, its id is in `in_flight`: a sweep given the same set leaves it alone.
    `progress` is called (from this thread or a worker thread) for every snapshot chunk received,
    every block of a part sent and every chunk read back: a long backup is moving, not stuck.
    """
    try:
        revision, _ = await client.get_prefix(REVISION_PROBE)
    except EtcdClientError as exc:
        raise StoreError(backups.SNAPSHOT_FAILED, str(exc)) from exc
    key = backups.snapshot_key(target.prefix, target.namespace, target.cluster, now, revision)
    upload: Upload = await asyncio.to_thread(store.begin, key)
    in_flight = set() if in_flight is None else in_flight
    in_flight.add(upload.upload_id)
    digest = hashlib.sha256()
    size = 0
    buffer = bytearray()

    async def sink(chunk: bytes) -> None:
        nonlocal size, buffer
        digest.update(chunk)
        size += len(chunk)
        buffer += chunk
        progress()
        if len(buffer) >= part_size:
            data, buffer = bytes(buffer), bytearray()
            await asyncio.to_thread(upload.part, data, progress)

    completed = False
    try:
        try:
            await client.snapshot(sink)
        except EtcdClientError as exc:
            raise StoreError(backups.SNAPSHOT_FAILED, str(exc)) from exc
        if buffer or size == 0:
            await asyncio.to_thread(upload.part, bytes(buffer))
        await asyncio.to_thread(upload.complete)
        completed = True
        stored = await asyncio.to_thread(_sha256_of, store, key, progress)
        if stored != digest.hexdigest():
            raise StoreError(backups.CHECKSUM_MISMATCH,
                             f"{key}: stored sha256 {stored} differs from the snapshot's {digest.hexdigest()}")
    except BaseException:
        # Nothing of this attempt may stay where a restore could pick it up.
        if completed:
            await asyncio.to_thread(_delete_quietly, store, key)
        else:
            await asyncio.to_thread(upload.abort)
        raise
    finally:
        in_flight.discard(upload.upload_id)
    manifest = Manifest(key=key, sha256=digest.hexdigest(), size=size, revision=revision,
                        taken=times.rfc3339(now), engine=engine, cluster=target.cluster,
                        namespace=target.namespace, cluster_uid=target.cluster_uid)
    await asyncio.to_thread(store.put, backups.manifest_key(key), manifest.to_json())
    log.info("backup %s published: revision %d, %d bytes, sha256 %s", key, revision, size, manifest.sha256)
    kept = await asyncio.to_thread(publish_latest, store, target, manifest)
    if kept is not None:
        log.warning("backup %s: latest not moved: %s", key, kept)
    return manifest


def publish_latest(store: ObjectStore, target: Target, manifest: Manifest) -> str | None:
    """Point "latest" at `manifest` if that moves it forward (backups.latest_stays), judged on
    "latest" as read just now and written only while it is still that (the store's conditional
    write where it has one); returns why "latest" was left as it is, or None once it names `manifest`.

    A write refused because "latest" changed since the read is read and judged again. An unreadable
    "latest" (not a manifest) names no backup that could be moved back from: it is replaced.
    """
    key = backups.latest_key(target.prefix, target.namespace, target.cluster)
    for _ in range(LATEST_ATTEMPTS):
        found = store.get_tagged(key)
        current, tag = None, None
        if found is not None:
            raw, tag = found
            try:
                current = Manifest.from_json(raw)
            except backups.ConfigError as exc:
                log.warning("%s is not a backup manifest (%s): replacing it", key, exc)
        if current == manifest:
            return None  # our own write, whose answer was lost and retried
        kept = backups.latest_stays(current, manifest)
        if kept is not None:
            return kept
        if store.put_if(key, manifest.to_json(), tag):
            return None
    return f"{key} changed under each of {LATEST_ATTEMPTS} attempts to publish it"


def _sha256_of(store: ObjectStore, key: str, progress: Callable[[], None]) -> str:
    digest = hashlib.sha256()
    for chunk in store.read(key):
        digest.update(chunk)
        progress()
    return digest.hexdigest()


def _delete_quietly(store: ObjectStore, key: str) -> None:
    try:
        store.delete(key)
    except StoreError as exc:
        log.warning("could not delete the unverified object %s: %s", key, exc)


def prune(store: ObjectStore, target: Target, *, keep: int | None, max_age: timedelta | None,
          now: datetime) -> list[str]:
    """Apply retention; returns the snapshot keys removed (manifest first, then the object)."""
    prefix = backups.cluster_prefix(target.prefix, target.namespace, target.cluster)
    keys = store.keys(prefix)
    latest_raw = store.get(backups.latest_key(target.prefix, target.namespace, target.cluster))
    latest = Manifest.from_json(latest_raw).key if latest_raw else None
    removed = backups.expired(backups.published(keys), keep=keep, max_age=max_age, now=now, latest=latest)
    for key in removed:
        store.delete(backups.manifest_key(key))  # unpublished first: never a manifest without its object
        store.delete(key)
    return removed


async def abort_abandoned(store: ObjectStore, target: Target, *, older_than: timedelta, now: datetime,
                          in_flight: set[str]) -> AsyncIterator[uploads.Incomplete]:
    """Abort the cluster's abandoned incomplete uploads, yielding each one as it is aborted (so a
    caller counts what was done even when a later abort raises StoreError). One already gone
    (its taker completed or aborted it meanwhile) is skipped."""
    prefix = backups.cluster_prefix(target.prefix, target.namespace, target.cluster)
    listed = await asyncio.to_thread(store.incomplete, prefix)
    for upload in uploads.abandoned(listed, now=now, older_than=older_than, in_flight=in_flight, prefix=prefix):
        if await asyncio.to_thread(store.abort_incomplete, upload):
            yield upload


def manifest_for(store: ObjectStore, source: str, target: Target) -> Manifest:
    """The manifest `fromBackup` names; BackupMissing if there is none."""
    key = backups.restore_manifest_key(source, target.prefix, target.namespace, target.cluster)
    raw = store.get(key)
    if raw is None:
        raise StoreError(backups.BACKUP_MISSING, f"no backup manifest at {key}")
    try:
        return Manifest.from_json(raw)
    except backups.ConfigError as exc:
        raise StoreError(backups.BACKUP_MISSING, f"{key}: {exc}") from exc


def fetch(store: ObjectStore, manifest: Manifest, dest: Path) -> None:
    """Download the snapshot to `dest`, checking its sha256; on mismatch nothing is left."""
    partial = dest.with_name(dest.name + ".partial")
    digest = hashlib.sha256()
    try:
        with open(partial, "wb") as fh:
            chunks: Iterator[bytes] = store.read(manifest.key)
            for chunk in chunks:
                digest.update(chunk)
                fh.write(chunk)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise StoreError(backups.RESTORE_FAILED, f"writing {partial}: {exc.strerror or exc}") from exc
    except StoreError:
        partial.unlink(missing_ok=True)
        raise
    if digest.hexdigest() != manifest.sha256:
        partial.unlink(missing_ok=True)
        raise StoreError(backups.CHECKSUM_MISMATCH,
                         f"{manifest.key}: sha256 {digest.hexdigest()} differs from the manifest's {manifest.sha256}")
    os.replace(partial, dest)


def restore(engine: Engine, config: RestoreConfig, env: dict[str, str] | None = None) -> None:
    """Run the engine's restore into a temporary directory and rename it into place."""
    final = Path(config.data_dir)
    staging = final.with_name(final.name + ".restoring")
    shutil.rmtree(staging, ignore_errors=True)  # a crash mid-restore left it: start over
    argv = engine.restore_command(RestoreConfig(config.snapshot, config.name, config.peer_url, str(staging),
                                                config.cluster_token))
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise StoreError(backups.RESTORE_FAILED, f"{argv[0]}: {exc}") from exc
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise StoreError(backups.RESTORE_FAILED, f"{' '.join(argv[:3])} exited {proc.returncode}: {' '.join(tail)}")
    if final.exists() and not any(final.iterdir()):
        final.rmdir()
    os.rename(staging, final)
