"""The backup shell: the leader's sidecar takes scheduled and on-demand backups.

Why the leader's sidecar and not a Job (docs/backups.md): it already holds the member's
client certificates and runs next to a member that has every committed write; exactly one
sidecar leads at a time, so exactly one takes a backup, with no Job image, scheduling or
cleanup; a leadership change hands the duty over by itself, and the schedule's anchor lives
in the backup Lease, not in memory, so the new leader neither repeats nor skips a run.

Each round: read the cluster object (spec.backup) and the backup Lease (the record, and the
on-demand request id the operator moved there from the cluster's backup-now annotation), ask
raftset.backups.decide, take at most one backup (its snapshot chunks, parts and read-back report
progress to the backup loop's supervision, so a large backup over a slow link is not taken for a
stuck round), then abort the incomplete uploads a killed taker left behind (raftset.sidecar.pure.uploads
decides which), publish the record (with the served request id and the count of aborted uploads).
The sidecar never writes the cluster object: its Role may only `get` it. Every failure is
recorded with its reason; none ends the loop.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from collections.abc import Callable
from typing import Any

from raftset import backups, contract
from raftset.sidecar.io import objectstore, snapshots
from raftset.sidecar.io.kube import SidecarKube
from raftset.sidecar.io.objectstore import StoreError
from raftset.sidecar.io.peers import Peers
from raftset.sidecar.metrics import STEP_BACKUP, Metrics
from raftset.sidecar.pure import heartbeat
from raftset.sidecar.pure.backup import backup_lease, destination
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells.plumbing import API_ERRORS, report
from raftset.times import rfc3339

log = logging.getLogger("raftset.sidecar")

LOOP = "backup"  # the name supervision runs BackupShell.round under (the app's loop table), and /livez shows


class BackupShell:
    """Leader-only (the app's loop table). Port: `reporter`, which makes the callable a backup tells its
    progress to as it moves bytes, from any thread (Loops.reporter)."""

    def __init__(self, settings: SidecarConfig, state: State, peers: Peers, kube: SidecarKube, metrics: Metrics, *,
                 reporter: Callable[[], Callable[[], None]]) -> None:
        self.settings, self.state, self.peers, self.kube, self.metrics = settings, state, peers, kube, metrics
        self.reporter = reporter
        self.waiting: str | None = None  # why the last round did not take a due backup, said once
        # Upload ids this sidecar's taker has open: a sweep never aborts them, whatever their age.
        self.in_flight: set[str] = set()

    async def round(self) -> None:
        settings = self.settings
        cluster = await self.kube.cluster_object(settings.engine.plural, settings.cluster)
        if cluster is None:
            return
        spec = (cluster.get("spec") or {}).get("backup")
        if not spec:
            return
        lease = await self.kube.lease(contract.backup_lease_name(settings.cluster))
        annotations = ((lease or {}).get("metadata") or {}).get("annotations") or {}
        record = backups.Record.from_json(annotations.get(contract.ANNOTATION_BACKUP_RECORD))
        request = annotations.get(contract.ANNOTATION_BACKUP_REQUEST)
        now = datetime.now(timezone.utc)
        invalid = backups.settings_error(spec)
        decision = backups.decide(None if invalid else spec.get("schedule"), request, record, now)
        updated = decision.record
        waiting = None if invalid or not decision.take else backups.unmounted(spec, settings.backup_mounts)
        if waiting is not None:
            # Neither attempted nor recorded: the request (or the due run) stays for the first
            # leader whose pod mounts the destination; the operator's roll brings it.
            if waiting != self.waiting:
                log.info("backup: %s", waiting)
            self.waiting = waiting
            return
        self.waiting = None
        if decision.take:
            log.info("backup: taking a %s backup", decision.trigger)
            uid = str((cluster.get("metadata") or {}).get("uid") or "")
            updated = await self.attempt(spec, updated, now, invalid, uid)
            if not invalid:
                updated = await self.sweep(spec, updated, now)
        if updated != record:
            await self.publish(updated, now)

    async def attempt(self, spec: dict[str, Any], record: backups.Record, now: datetime,
                      invalid: str | None, cluster_uid: str) -> backups.Record:
        """One backup, counted as the outcome of a backup round: `taken`, or the failure's reason."""
        updated, outcome = await self._take(spec, record, now, invalid, cluster_uid)
        self.metrics.outcome(STEP_BACKUP, outcome)
        return updated

    async def _take(self, spec: dict[str, Any], record: backups.Record, now: datetime,
                    invalid: str | None, cluster_uid: str) -> tuple[backups.Record, str]:
        settings = self.settings
        if invalid:
            return backups.failed(record, now, backups.INVALID_CONFIG, invalid), backups.INVALID_CONFIG
        try:
            dest = destination(settings.backup_mount_root, spec)
            store = await asyncio.to_thread(objectstore.open_store, dest)
            target = snapshots.Target(dest.prefix, settings.namespace, settings.cluster, cluster_uid)
            manifest = await snapshots.take(self.peers.local, store, target, settings.engine.name, now,
                                            in_flight=self.in_flight, progress=self.reporter())
        except StoreError as exc:
            log.error("backup failed: %s", exc)
            return backups.failed(record, now, exc.reason, exc.message), exc.reason
        except backups.ConfigError as exc:
            return backups.failed(record, now, backups.INVALID_CONFIG, str(exc)), backups.INVALID_CONFIG
        keep, max_age = backups.retention_of(spec)
        if keep is not None or max_age is not None:
            try:
                removed = await asyncio.to_thread(snapshots.prune, store, target, keep=keep, max_age=max_age,
                                                  now=now)
            except StoreError as exc:
                report(self.state, "backup retention", exc)
            else:
                if removed:
                    log.info("backup retention removed %d backup(s): %s", len(removed), ", ".join(removed))
        return backups.succeeded(record, manifest), "taken"

    async def sweep(self, spec: dict[str, Any], record: backups.Record, now: datetime) -> backups.Record:
        """Abort the incomplete uploads older than retention.abortIncompleteUploadsAfter (a killed
        taker's, which S3 would keep and bill forever); a failure is logged and retried after the
        next backup, the aborts done before it are counted."""
        settings = self.settings
        count = 0
        try:
            older_than = backups.abort_uploads_after(spec)
            dest = destination(settings.backup_mount_root, spec)
            store = await asyncio.to_thread(objectstore.open_store, dest)
            target = snapshots.Target(dest.prefix, settings.namespace, settings.cluster)
            async for upload in snapshots.abort_abandoned(store, target, older_than=older_than, now=now,
                                                          in_flight=self.in_flight):
                count += 1
                self.metrics.upload_aborted()
                await self._narrate(f"aborted the incomplete upload of {upload.key} (upload id {upload.upload_id}), "
                                    f"started {rfc3339(upload.initiated)}: older than "
                                    "retention.abortIncompleteUploadsAfter")
        except (StoreError, backups.ConfigError) as exc:
            report(self.state, "backup upload sweep", exc)
        return backups.aborted(record, count) if count else record

    async def _narrate(self, message: str) -> None:
        """A log line and a Normal Event about the cluster per abort; a failed post is only logged."""
        log.warning("backup: %s", message)
        try:
            subject = heartbeat.event_subject(await self.peers.workload(), self.settings.namespace)
            if subject is not None:
                await self.kube.post_event(subject, warning=False, reason="BackupUploadAborted", message=message,
                                            component=self.settings.pod_name)
        except API_ERRORS as exc:
            report(self.state, "backup event", exc)

    async def publish(self, record: backups.Record, now: datetime) -> None:
        await self.kube.apply_lease(backup_lease(self.settings, {contract.ANNOTATION_BACKUP_RECORD: record.to_json()},
                                                  now, self.state.workload_owner))
