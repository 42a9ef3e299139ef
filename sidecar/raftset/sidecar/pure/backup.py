"""Where a backup goes and where a restore reads, and the backup Lease a sidecar writes (shell: raftset.sidecar.shells.backup)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from raftset import backups, contract
from raftset.sidecar.pure import heartbeat, leases
from raftset.sidecar.pure.config import SidecarConfig


def destination(settings_root: str, spec: dict[str, Any]) -> backups.Destination:
    """spec.backup's destination, at the paths the pod mounts its credentials at."""
    return backups.destination_of(
        spec, credentials_dir=settings_root + contract.BACKUP_CREDENTIALS_MOUNT,
        ca_dir=settings_root + contract.BACKUP_CA_MOUNT, volume=settings_root + contract.BACKUP_VOLUME_MOUNT)


def restore_destination(settings_root: str, source: dict[str, Any], backup_spec: dict[str, Any]) -> backups.Destination:
    """Where spec.bootstrap.fromBackup reads: its own s3/pvc (mounted apart), else spec.backup's destination.

    Raises backups.ConfigError (or KeyError) on a source the CRD's validation should have refused.
    """
    if not source.get("s3") and not source.get("pvc"):
        return destination(settings_root, backup_spec)
    return backups.destination_of(
        source, credentials_dir=settings_root + contract.RESTORE_CREDENTIALS_MOUNT,
        ca_dir=settings_root + contract.RESTORE_CA_MOUNT, volume=settings_root + contract.RESTORE_VOLUME_MOUNT)


def backup_lease(settings: SidecarConfig, annotations: dict[str, str], now: datetime,
                 owner: dict[str, Any] | None) -> dict[str, Any]:
    """The cluster's backup Lease, as this sidecar writes it (backup record, or restore failure)."""
    return leases.lease(
        contract.backup_lease_name(settings.cluster), settings.namespace,
        labels={**contract.selector_labels(settings.cluster), contract.LABEL_BACKUP: "true"},
        annotations=annotations, holder=settings.pod_name,
        duration=settings.lease_duration, renew_time=heartbeat.rfc3339(now), owner=owner)
