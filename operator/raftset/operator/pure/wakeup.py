"""When a cluster's next round is due although nothing it watches changes, and which watch events matter.

The operator reconciles a cluster when something it reads changes (a watch event) and otherwise
sleeps until the first moment a decision would come out differently on its own: a heartbeat goes
stale, a scale step becomes stuck, a disagreement has lasted long enough to be told, the status's
heartbeat times are due for a refresh, the full re-apply (the safety resync) is due. A cluster in
motion (a step, a roll, a condition not at rest) is also looked at again after the recheck period,
as the timer did: its waits read what no watch delivers (the pods' events, PVCs, the apiserver's
discovery). Everything here is plain data over the operator's own clock.

A heartbeat renewal changes only the Lease's resourceVersion and renewTime, and every member renews
every few seconds: a renewal that changes nothing a decision reads (`LeaseView`) wakes nothing, its
sighting only pushes its expiry later; likewise the leader's refresh of the membership record
(`membership_wakes`). A heartbeat that goes stale rings its cluster through one
timer for every Lease (raftset.operator.staleness), not through each cluster's wake-up time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from raftset import contract
from raftset.membership import parse_membership
from raftset.operator.pure.freshness import Sighting
from raftset.operator.pure.lasting import Seen
from raftset.operator.pure.quorum_loss import CONDITION as QUORUM_CONDITION
from raftset.operator.pure.scale_step import ScaleStep
from raftset.times import parse_rfc3339

# What a heartbeat's record says that changes on every renewal, and that no decision waits for.
RENEWAL_KEYS = frozenset({"time", "raft_index", "raft_applied_index"})
LAST_HEARTBEAT = "lastHeartbeat"  # the status's member field the status refresh is about


@dataclass(frozen=True)
class Wake:
    """When the next round is due without an event (a heartbeat going stale rings on its own)."""

    at: datetime


def stuck_at(pending: ScaleStep | None, stuck_after: float) -> datetime | None:
    """When the recorded scale step becomes stuck (planner.plan's Degraded wait); None without one."""
    started = parse_rfc3339(pending.started) if pending is not None else None
    return started + timedelta(seconds=stuck_after) if started is not None else None


def lasting_at(seen: Mapping[str, Seen], grace: timedelta) -> datetime | None:
    """When the first disagreement not yet told has lasted `grace` (lasting.track announces it then)."""
    return min((s.since + grace for s in seen.values() if not s.announced), default=None)


def refresh_at(shown: Mapping[str, Any], computed: Mapping[str, Any], refresh_seconds: float) -> datetime | None:
    """When a heartbeat time the status shows, older than the one computed, is due for its refresh
    (status.patch_due writes it `refresh_seconds` after the shown one)."""
    due: list[datetime] = []
    for before, after in zip(shown.get("members") or [], computed.get("members") or []):
        moment = parse_rfc3339(before.get(LAST_HEARTBEAT))
        if moment is not None and before.get(LAST_HEARTBEAT) != after.get(LAST_HEARTBEAT):
            due.append(moment + timedelta(seconds=refresh_seconds))
    return min(due, default=None)


# The QuorumLost reasons of a cluster whose quorum is whole and no recovery runs
# (raftset.operator.pure.quorum_loss); its other reasons (Rejoining: Available again, members
# still to come back) are a recovery under way.
QUORUM_AT_REST = frozenset({"QuorumHealthy", "Recovered"})


def at_rest(action: str, status: Mapping[str, Any]) -> bool:
    """Steady, Available, neither Progressing nor Degraded, no quorum loss nor recovery under way:
    nothing is waited for but events."""
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    quorum = conditions.get(QUORUM_CONDITION)
    return (action == "steady" and conditions.get("Available", {}).get("status") == "True"
            and conditions.get("Progressing", {}).get("status") != "True"
            and conditions.get("Degraded", {}).get("status") != "True"
            and (quorum is None or quorum.get("reason") in QUORUM_AT_REST))


def next_wake(now: datetime, *, recheck_seconds: float, resting: bool, resync_at: datetime,
              due: Iterable[datetime | None] = ()) -> Wake:
    """The next round without an event. `due`: the moments the decisions asked for (stuck_at,
    lasting_at, refresh_at, ...). A moment already past (a write that failed, a status the object
    does not show yet) is retried after `recheck_seconds`, the old timer's pace, never at once."""
    recheck = now + timedelta(seconds=recheck_seconds)
    moments = [m for m in (resync_at, *due) if m is not None]
    if not resting:
        moments.append(recheck)
    return Wake(min(m if m > now else recheck for m in moments))


@dataclass(frozen=True)
class LeaseView:
    """What the decisions read of one heartbeat Lease, leaving out what every renewal changes."""

    holder: str
    duration: int
    record: str  # the heartbeat annotation without RENEWAL_KEYS, canonical JSON; raw when unreadable


def lease_view(lease: Mapping[str, Any]) -> LeaseView:
    spec = lease.get("spec") or {}
    raw = str(((lease.get("metadata") or {}).get("annotations") or {}).get(contract.ANNOTATION_HEARTBEAT) or "")
    try:
        beat = json.loads(raw)
    except ValueError:
        beat = None
    record = (json.dumps({k: v for k, v in beat.items() if k not in RENEWAL_KEYS}, sort_keys=True)
              if isinstance(beat, dict) else raw)
    duration = spec.get("leaseDurationSeconds")
    return LeaseView(str(spec.get("holderIdentity") or ""), duration if isinstance(duration, int) else 0, record)


@dataclass(frozen=True)
class Heard:
    """One heartbeat Lease as last heard: what it says, and the operator's sighting of it."""

    view: LeaseView
    sighting: Sighting


def membership_wakes(before: str | None, after: str | None) -> bool:
    """Does a membership record call for a round? One that changes who is a member, a learner or
    started, or the leader and term does (`RaftMembership.change_key`, what the sidecar publishes at
    once); the leader's refresh every heartbeat interval, new indexes and time only, does not. A
    round in motion reads the indexes all the same: it looks again after the recheck period."""
    if before is None or after is None:
        return before != after
    old, new = parse_membership(before), parse_membership(after)
    if old is None or new is None:
        return before != after
    return old.change_key != new.change_key


def lease_wakes(before: Heard | None, after: Heard, now: datetime) -> bool:
    """Does this Lease event call for a round? A new Lease, a changed record, a first renewal seen
    (the planner waits for one after a restart), or a renewal of a record that had gone stale do;
    a plain renewal does not."""
    if before is None or before.view != after.view or before.sighting.confirmed != after.sighting.confirmed:
        return True
    # 30 s: heartbeats.from_lease's default for a Lease without a duration.
    expired = before.sighting.observed + timedelta(seconds=before.view.duration or 30)
    return expired <= now and after.sighting != before.sighting
