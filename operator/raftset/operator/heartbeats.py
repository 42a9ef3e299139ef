"""The members as the operator sees them: one heartbeat Lease per pod, written by its sidecar."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from raftset import contract


@dataclass(frozen=True)
class HeartbeatRecord:
    pod: str
    ordinal: int
    member_id: str
    role: str
    healthy: bool
    renewed: datetime
    expires: datetime

    def fresh(self, now: datetime) -> bool:
        return now < self.expires

    @property
    def voting(self) -> bool:
        return self.role in (contract.ROLE_LEADER, contract.ROLE_FOLLOWER)


def _parse_time(raw: str | None) -> datetime | None:
    if not raw:
        return None
    parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def from_lease(lease: Mapping[str, Any]) -> HeartbeatRecord | None:
    """A heartbeat Lease as a HeartbeatRecord; None if it is not one or cannot be read."""
    meta = lease.get("metadata") or {}
    spec = lease.get("spec") or {}
    pod = spec.get("holderIdentity")
    raw = (meta.get("annotations") or {}).get(contract.ANNOTATION_HEARTBEAT)
    if not pod or not raw:
        return None
    # Anyone with Lease write access can put anything here: unreadable means "no record".
    try:
        renewed = _parse_time(spec.get("renewTime"))
        beat = json.loads(raw)
        ordinal = contract.ordinal_of(pod)
        duration = int(spec.get("leaseDurationSeconds") or 30)
    except (AttributeError, TypeError, ValueError):
        return None
    if renewed is None or not isinstance(beat, dict):
        return None
    role = beat.get("role") if beat.get("role") in contract.ROLES else contract.ROLE_UNKNOWN
    return HeartbeatRecord(
        pod=pod,
        ordinal=ordinal,
        member_id=str(beat.get("member_id") or ""),
        role=role,
        healthy=bool(beat.get("healthy")),
        renewed=renewed,
        expires=renewed + timedelta(seconds=duration),
    )


def from_leases(leases: Iterable[Mapping[str, Any]]) -> list[HeartbeatRecord]:
    """Readable heartbeat records sorted by ordinal; unreadable Leases are ignored."""
    members = (from_lease(lease) for lease in leases)
    return sorted((m for m in members if m is not None), key=lambda m: m.ordinal)
