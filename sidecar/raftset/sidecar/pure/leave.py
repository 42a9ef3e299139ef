"""Leaving: is this pod scaled away or only restarting, and what to do about it.

Restart is not leave: SIGTERM also comes with rolling updates, drains and evictions.
Only a pod whose ordinal the workload no longer keeps removes its member; every
terminating leader hands leadership away first. The operator's scale-away mark on the
pod is reported but never decides on its own: a plan can change its mind between the
mark and the workload write, and a restart in that window must keep its member.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from raftset import contract
from raftset.sidecar.pure.etcd import Member, Status
from raftset.sidecar.pure.removal_guard import may_leave
from raftset.workloads import Backend, being_deleted

_FALSE = ("", "false", "0", "no")


def _marked(pod: Mapping[str, Any]) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    mark = annotations.get(contract.ANNOTATION_SCALE_AWAY)
    return mark is not None and str(mark).strip().lower() not in _FALSE


@dataclass(frozen=True)
class Fate:
    scaled_away: bool
    reason: str


def fate(ordinal: int, backend: Backend, workload: Mapping[str, Any] | None, pod: Mapping[str, Any]) -> Fate:
    """Scaled away or restarting: the workload object decides, our own pod's mark only explains."""
    if workload is None:
        return Fate(False, "the workload is gone (cluster deletion): keep the membership")
    if being_deleted(workload):
        return Fate(False, "the workload is being deleted (cluster deletion): keep the membership")
    kept = backend.kept(workload)
    if ordinal not in kept:
        return Fate(True, f"ordinal {ordinal} is not among the kept ordinals {kept}")
    if _marked(pod):
        return Fate(False, f"ordinal {ordinal} is kept {kept} although marked {contract.ANNOTATION_SCALE_AWAY} "
                           f"(a stale mark): restarting, keep the membership")
    return Fate(False, f"ordinal {ordinal} is kept {kept}: restarting, keep the membership")


@dataclass(frozen=True)
class LeaveDecision:
    move_leader_to: int | None
    remove: bool
    reason: str


def transfer_target(
    own_id: int, members: Sequence[Member], statuses: Mapping[int, Status | None],
    ordinal_of: Mapping[int, int | None], kept: Sequence[int], terminating: Collection[int] = (),
) -> int | None:
    """The healthiest voting member to lead next: kept ordinals first, most caught up; never one
    whose own pod is terminating (it would hand leadership on again, or stop under it)."""
    candidates = []
    for m in members:
        status = statuses.get(m.id)
        if m.id == own_id or m.is_learner or not m.started or status is None or status.problems:
            continue
        ordinal = ordinal_of.get(m.id)
        if ordinal in terminating:
            continue
        candidates.append((ordinal in kept, status.raft_applied_index, -(ordinal or 0), m.id))
    return max(candidates)[-1] if candidates else None


def wants_terminating(statuses: Mapping[int, Status | None], own_id: int, *, hand_off: bool) -> bool:
    """Whether `decide` needs the members' pods read: only a leader that may hand off chooses a target."""
    own = statuses.get(own_id)
    return hand_off and own is not None and own.is_leader


def decide(
    fate: Fate, own_id: int, members: Sequence[Member], statuses: Mapping[int, Status | None],
    ordinal_of: Mapping[int, int | None], kept: Sequence[int], *, hand_off: bool = True,
    terminating: Collection[int] = (),
) -> LeaveDecision:
    """Hand leadership away if we lead; remove ourselves if scaled away and quorum allows.

    `hand_off` is the engine's capability: where MoveLeader is not safe (Xline), a leaving
    leader does not move leadership, and the others elect a new leader once it is gone.
    `terminating` holds the ordinals whose pods the API showed terminating just now.
    """
    own = statuses.get(own_id)
    leading = own is not None and own.is_leader
    target = transfer_target(own_id, members, statuses, ordinal_of, kept, terminating) if leading and hand_off else None
    if leading and hand_off and target is None and terminating:
        fate = Fate(fate.scaled_away, f"{fate.reason}; no leadership hand-off: every other voter's pod is "
                                      f"terminating or unhealthy")
    if leading and not hand_off:
        fate = Fate(fate.scaled_away, f"{fate.reason}; no leadership hand-off (MoveLeader is not safe on this "
                                      f"engine): an election follows this member's exit")
    if not fate.scaled_away:
        return LeaveDecision(target, False, fate.reason)
    if not any(m.id == own_id for m in members):
        return LeaveDecision(None, False, "already removed from the cluster")
    if not may_leave(members, statuses, own_id):
        return LeaveDecision(target, False, f"{fate.reason}; but removing this member would lose quorum: keep it")
    return LeaveDecision(target, True, fate.reason)
