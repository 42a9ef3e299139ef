"""The members as the operator sees them: one heartbeat Lease per pod, written by its sidecar.

A record expires `leaseDurationSeconds` after the operator *observed* its last renewal
(`raftset.operator.pure.freshness`), never by the sidecar's `renewTime`, so a node whose
clock is off neither kills nor immortalises its member. `renewed` is kept for display.

`healthy` is the member's Status (it names a leader, no error); `ready` is whether a
linearizable read went through it (raftset.sidecar.pure.readiness). Only Available follows `ready`:
the planner, rolls and quorum loss act on `healthy`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from raftset import contract
from raftset.operator.pure.freshness import Sighting
from raftset.times import parse_rfc3339


@dataclass(frozen=True)
class HeartbeatRecord:
    pod: str
    ordinal: int
    member_id: str
    role: str
    healthy: bool
    renewed: datetime  # the sidecar's renewTime, on the sidecar's clock: shown, never compared
    observed: datetime  # on the operator's clock: when it saw the last renewal
    expires: datetime  # on the operator's clock: observed + leaseDurationSeconds
    confirmed: bool = True  # a renewal was observed (False: only first seen, e.g. after a restart)
    # The member's own Status, which it serves without quorum too; raft_term 0: it did not answer.
    raft_term: int = 0
    raft_index: int = 0  # the commit index
    applied_index: int = 0
    # The sidecar's readiness verdict (its /readyz); False where the record carries none.
    ready: bool = False
    ready_reason: str = ""  # why not, empty when ready

    def fresh(self, now: datetime) -> bool:
        return now < self.expires

    @property
    def voting(self) -> bool:
        return self.role in (contract.ROLE_LEADER, contract.ROLE_FOLLOWER)


# A record without a verdict (a sidecar older than it, or a hand-written Lease) is no evidence
# that a read commits: it does not count as serving.
NO_VERDICT = "its heartbeat carries no readiness verdict (a sidecar older than the operator?)"


def from_lease(lease: Mapping[str, Any], sighting: Sighting | None = None) -> HeartbeatRecord | None:
    """A heartbeat Lease as a HeartbeatRecord; None if it is not one or cannot be read.

    The operator always passes the `sighting`; without one the record expires from its
    own renewTime, which only a reader on the sidecar's machine may do (tests, benchmarks).
    """
    meta = lease.get("metadata") or {}
    spec = lease.get("spec") or {}
    pod = spec.get("holderIdentity")
    raw = (meta.get("annotations") or {}).get(contract.ANNOTATION_HEARTBEAT)
    if not pod or not raw:
        return None
    # Anyone with Lease write access can put anything here: unreadable means "no record".
    try:
        renewed = parse_rfc3339(spec.get("renewTime"))
        beat = json.loads(raw)
        ordinal = contract.ordinal_of(pod)
        duration = _duration(spec)
    except (AttributeError, TypeError, ValueError):
        return None
    if renewed is None or not isinstance(beat, dict):
        return None
    role = beat.get("role") if beat.get("role") in contract.ROLES else contract.ROLE_UNKNOWN
    observed = sighting.observed if sighting else renewed
    return HeartbeatRecord(
        pod=pod,
        ordinal=ordinal,
        member_id=str(beat.get("member_id") or ""),
        role=role,
        healthy=bool(beat.get("healthy")),
        renewed=renewed,
        observed=observed,
        expires=observed + timedelta(seconds=duration),
        confirmed=sighting.confirmed if sighting else True,
        raft_term=_count(beat.get("raft_term")),
        raft_index=_count(beat.get("raft_index")),
        applied_index=_count(beat.get("raft_applied_index")),
        **_readiness(beat),
    )


def _duration(spec: Mapping[str, Any]) -> int:
    """The Lease's duration in seconds, 30 without one; ValueError where it is not a number."""
    return int(spec.get("leaseDurationSeconds") or 30)


def expiry(lease: Mapping[str, Any], sighting: Sighting) -> datetime:
    """When the Lease seen at `sighting` is stale unless renewed: its record's `expires` (an
    unreadable duration counts as the default: the record is none, and a round then costs little)."""
    try:
        duration = _duration(lease.get("spec") or {})
    except (TypeError, ValueError):
        duration = 30
    return sighting.observed + timedelta(seconds=duration)


def _readiness(beat: Mapping[str, Any]) -> dict[str, Any]:
    """`ready` only for a JSON true; a verdict of any other shape is none."""
    verdict = beat.get("ready")
    if not isinstance(verdict, bool):
        return {"ready": False, "ready_reason": NO_VERDICT}
    reason = beat.get("ready_reason")
    return {"ready": verdict, "ready_reason": reason if isinstance(reason, str) and not verdict else ""}


def _count(raw: Any) -> int:
    """A non-negative integer from a record anyone could have written; 0 if it is not one."""
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 else 0


def from_leases(leases: Iterable[Mapping[str, Any]]) -> list[HeartbeatRecord]:
    """Readable heartbeat records sorted by ordinal; unreadable Leases are ignored."""
    members = (from_lease(lease) for lease in leases)
    return sorted((m for m in members if m is not None), key=lambda m: m.ordinal)


# The index entry of one heartbeat Lease: the Lease and the operator's sighting of it.
LEASE, SIGHTING = "lease", "sighting"


def from_observed(entries: Iterable[Mapping[str, Any]], cluster: str) -> list[HeartbeatRecord]:
    """Records of `cluster`'s members from the heartbeats index ({LEASE: ..., SIGHTING: ...}), by ordinal.

    A Lease held by a pod not named like a member (a stray with the cluster's labels) is no record."""
    members = (from_lease(e[LEASE], e.get(SIGHTING)) for e in entries)
    return sorted((m for m in members if m is not None and contract.member_ordinal(cluster, m.pod) is not None),
                  key=lambda m: m.ordinal)
