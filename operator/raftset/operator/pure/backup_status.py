"""What the backup Lease means for the cluster's status: status.backup, BackupReady, the
Degraded reason of a failed restore, and one Event per failed backup.

Pure: the leader's sidecar wrote the record (raftset.backups.Record) and, while a restore
cannot proceed, the restore failure, both as annotations of the cluster's backup Lease.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raftset import backups, contract, records
from raftset.operator.pure.spec import Cluster
from raftset.operator.pure.events import Event


def record(annotations: Mapping[str, str] | None) -> backups.Record | None:
    raw = (annotations or {}).get(contract.ANNOTATION_BACKUP_RECORD)
    return backups.Record.from_json(raw) if raw else None


def section(annotations: Mapping[str, str] | None) -> dict[str, Any]:
    """status.backup: empty until the first attempt."""
    current = record(annotations)
    return backups.status_of(current) if current else {}


def ready(cluster: Cluster, annotations: Mapping[str, str] | None) -> tuple[str, bool, str, str]:
    """BackupReady as (type, status, reason, message); a spec the CRD let through but that
    cannot work (an out-of-range cron value) is InvalidBackupConfig at once."""
    invalid = backups.settings_error(cluster.backup or {})
    if invalid:
        return "BackupReady", False, backups.INVALID_CONFIG, invalid
    state, reason, message = backups.condition(record(annotations), bool(cluster.backup))
    return "BackupReady", state == "True", reason, message


def restore_problem(cluster: Cluster, annotations: Mapping[str, str] | None) -> tuple[str, str] | None:
    """(reason, message) for Degraded while the first member cannot restore fromBackup."""
    raw = (annotations or {}).get(contract.ANNOTATION_RESTORE_FAILURE)
    if not cluster.from_backup or not raw:
        return None
    failure = records.parse(raw, lambda doc: (str(doc["reason"]), str(doc["message"])))
    if failure is None:
        return backups.RESTORE_FAILED, "the restore failed (its report is unreadable)"
    return failure[0], f"restore from backup: {failure[1]}; no member has started"


def announcements(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Event]:
    """A Warning Event for every failure not announced yet (a new lastFailure); failures that came and went
    between two reconciles (the record keeps only the last one's details) are counted in it."""
    failure = new.get("lastFailure")
    if not failure or (failure == old.get("lastFailure") and new.get("failures") == old.get("failures")):
        return []
    if "failures" in old:
        missed = int(new.get("failures") or 0) - int(old["failures"]) - 1
    else:  # none failed before (nothing shown), or a status from before failures were counted (cannot tell)
        missed = int(new.get("failures") or 0) - 1 if not old.get("lastFailure") else 0
    earlier = f" ({missed} earlier failure{'s' if missed > 1 else ''} since the last one told)" if missed > 0 else ""
    return [Event("Warning", f"Backup{failure.get('reason', 'Failed')}",
             f"backup failed at {failure.get('time')}: {failure.get('message', '')}{earlier}")]
