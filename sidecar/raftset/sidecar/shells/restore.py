"""The restore shell: a member that bootstraps a cluster with spec.bootstrap.fromBackup (etcd's
first member; each of Xline's initial members) restores the backup into its data dir before its
startup file is written, from the snapshot the restore Lease pins.

Order, so that nothing starts half-restored: the manifest (BackupMissing if absent) -> the
snapshot, streamed to the data volume with its sha256 checked (ChecksumMismatch) -> the
engine's restore command into a staging directory, renamed into place -> only then the
startup file. Until that succeeds the store does not start and the other members wait for
the first one, as they do for any bootstrap. Each failure is published on the backup Lease
(the operator turns it into a Degraded reason and an Event) and retried after a pause: a
backup that appears later (or a fixed Secret) is used without touching the cluster.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from raftset import backups, contract, times
from raftset.engines import RestoreConfig
from raftset.sidecar.io import objectstore, snapshots
from raftset.sidecar.io.kube import SidecarKube
from raftset.sidecar.io.objectstore import StoreError
from raftset.sidecar.pure.backup import backup_lease, restore_destination
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells.plumbing import report

log = logging.getLogger("raftset.sidecar")

RETRY_AFTER = 30.0  # seconds between attempts: a corrupt snapshot is not worth a tight loop


class RestoreShell:
    def __init__(self, settings: SidecarConfig, state: State, kube: SidecarKube) -> None:
        self.settings, self.state, self.kube = settings, state, kube
        self.retry_at = 0.0
        self.failure = ""

    async def source(self) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """spec.bootstrap.fromBackup and spec.backup (its default destination), if a restore is asked."""
        settings = self.settings
        cluster = await self.kube.cluster_object(settings.engine.plural, settings.cluster)
        spec = (cluster or {}).get("spec") or {}
        source = (spec.get("bootstrap") or {}).get("fromBackup")
        return (dict(source), dict(spec.get("backup") or {})) if source else None

    async def prepare(self) -> bool:
        """True when the member may bootstrap: no restore asked, or the restore is in place."""
        source = await self.source()
        if source is None:
            return True
        if time.monotonic() < self.retry_at:
            self.state.last_error = f"waiting: restore failed, retrying soon: {self.failure}"
            return False
        now = datetime.now(timezone.utc)
        try:
            manifest = await self.restore(*source)
        except StoreError as exc:
            self.retry_at = time.monotonic() + RETRY_AFTER
            self.failure = str(exc)
            log.error("restore from backup failed: %s", exc)
            self.state.last_error = f"restore: {exc}"
            await self.publish({"time": times.rfc3339(now), "reason": exc.reason, "message": exc.message}, now)
            return False
        log.info("restored %s (revision %d, sha256 %s) as member %s", manifest.key, manifest.revision,
                 manifest.sha256, self.settings.pod_name)
        await self.publish(None, now)
        return True

    async def restore(self, source: dict[str, Any], backup_spec: dict[str, Any]) -> backups.Manifest:
        settings = self.settings
        engine = settings.engine
        try:
            dest = restore_destination(settings.backup_mount_root, source, backup_spec)
        except (backups.ConfigError, KeyError) as exc:
            raise StoreError(backups.INVALID_CONFIG, f"spec.bootstrap.fromBackup: {exc}") from exc
        target = snapshots.Target(dest.prefix, source.get("namespace") or settings.namespace,
                                  source.get("cluster") or settings.cluster)
        store = await asyncio.to_thread(objectstore.open_store, dest)
        try:
            manifest = await asyncio.to_thread(snapshots.manifest_for, store, str(source["backup"]), target)
            pinned = await self.pin(manifest.key)
            if pinned != manifest.key:
                manifest = await asyncio.to_thread(snapshots.manifest_for, store, pinned, target)
        except backups.ConfigError as exc:
            raise StoreError(backups.INVALID_CONFIG, str(exc)) from exc
        data_dir = Path(settings.data_dir)
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        snapshot = data_dir.parent / "restore.snapshot.db"
        try:
            await asyncio.to_thread(snapshots.fetch, store, manifest, snapshot)
            config = RestoreConfig(snapshot=str(snapshot), name=settings.pod_name, peer_url=settings.peer_url,
                                   data_dir=str(data_dir), cluster_token=settings.cluster_token)
            await asyncio.to_thread(snapshots.restore, engine, config, dict(os.environ))
        finally:
            snapshot.unlink(missing_ok=True)
        return manifest

    async def pin(self, key: str) -> str:
        """The snapshot every member of this restore uses: the first to get here names it on the
        restore Lease, the others restore that one. Where an engine's initial members each restore
        (Xline), a `latest` that moved between their reads would otherwise seed one cluster with
        different data on different members."""
        settings, kube = self.settings, self.kube
        name = contract.restore_lease_name(settings.cluster)
        # Not leases.lease(): its holder and renew time differ per member, and would make every claim
        # after the first a conflict even when the key agrees. Only the key is claimed.
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": settings.namespace,
                             "labels": contract.selector_labels(settings.cluster),
                             "annotations": {contract.ANNOTATION_RESTORE_SOURCE: key},
                             **({"ownerReferences": [self.state.workload_owner]} if self.state.workload_owner else {})},
                "spec": {}}
        if await kube.claim_lease(body, settings.pod_name):
            return key
        lease = await kube.lease(name) or {}
        pinned = ((lease.get("metadata") or {}).get("annotations") or {}).get(contract.ANNOTATION_RESTORE_SOURCE)
        if not pinned:
            raise StoreError(backups.INVALID_CONFIG, f"Lease {name} was claimed without a snapshot key")
        if pinned != key:
            log.info("restore: %s is pinned for this cluster (asked for %s)", pinned, key)
        return pinned

    async def publish(self, failure: dict[str, str] | None, now: datetime) -> None:
        """The failure (or its absence) on the backup Lease, where the operator looks."""
        annotations = {contract.ANNOTATION_RESTORE_FAILURE: json.dumps(failure, sort_keys=True)} if failure else {}
        body = backup_lease(self.settings, annotations, now, self.state.workload_owner)
        try:
            await self.kube.apply_lease(body)
        except Exception as exc:  # noqa: BLE001 - the restore's outcome stands; the report is retried next time
            report(self.state, "restore report", exc)
