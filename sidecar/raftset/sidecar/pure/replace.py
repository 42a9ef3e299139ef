"""Replacing one member: on request, and deciding the join again when its premise fails.

Pure: the shell (raftset.sidecar.shells.replace) gathers the pod's annotations, an authoritative
MemberList and the members' Statuses; these functions say what to do. Replacing a member is
leaving Raft and joining again as a new member on fresh data: the old data dir is moved
aside by the join (raftset.sidecar.io.datadir), the sidecar records which member it replaces
on its own pod (raftset.replace.Progress), and the operator narrates that record (raftset.operator.pure.replace).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from raftset import contract, replace
from raftset.replace import Progress
from raftset.sidecar.pure import corruption
from raftset.sidecar.pure.etcd import Alarm, AlarmKind, Member, Status
from raftset.sidecar.pure.removal_guard import may_remove


def requested(pod: Mapping[str, Any] | None) -> bool:
    """The user asked: `kubectl annotate pod <pod> raftset.dev/replace=true`."""
    return replace.requested(((pod or {}).get("metadata") or {}).get("annotations"))


def progress(pod: Mapping[str, Any] | None) -> Progress | None:
    """Our record of the replacement under way on the pod; None when absent, unreadable or finished (a
    finished record stays for the operator to tell: the next replacement begins a record of its own)."""
    annotations = ((pod or {}).get("metadata") or {}).get("annotations") or {}
    record = replace.parse_progress(annotations.get(contract.ANNOTATION_REPLACE_PROGRESS))
    return None if record is None or record.finished else record


def corruption_verdict(pod: Mapping[str, Any] | None) -> corruption.CorruptionRecord | None:
    """The leader's verdict on a CORRUPT alarm, as it wrote it on the pod; None when absent or unreadable."""
    annotations = ((pod or {}).get("metadata") or {}).get("annotations") or {}
    return corruption.parse_record(annotations.get(contract.ANNOTATION_CORRUPTION))


def store_container(pod: Mapping[str, Any] | None, container: str) -> Mapping[str, Any]:
    """The store container's status in our pod (kubelet's restartCount, state, lastState)."""
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return next((c for c in statuses if c.get("name") == container), {})


def restart_baseline(pod: Mapping[str, Any] | None) -> int:
    annotations = ((pod or {}).get("metadata") or {}).get("annotations") or {}
    try:
        return int(annotations.get(contract.ANNOTATION_RESTART_BASELINE, 0))
    except (TypeError, ValueError):
        return 0


REQUESTED_CAUSE = f"asked for ({contract.ANNOTATION_REPLACE}=true)"


def cause(requested: bool, diagnosis: str | None) -> str:
    """Why a replacement begins, for its record (Progress.cause): a person's request, else the diagnosis."""
    return REQUESTED_CAUSE if requested else diagnosis or ""


def diagnose(store: Mapping[str, Any], serving: bool, corruption_texts: Sequence[str], threshold: int,
             baseline: int) -> str | None:
    """Why our member needs replacing, from kubelet's view of our store; None while it serves or may recover.

    Corrupt: the store's last exit left a corruption error in its termination message.
    Crash loop: it restarted `threshold` times since the member last joined (`baseline`).
    """
    if serving or not store:
        return None
    last = (store.get("lastState") or {}).get("terminated") or {}
    message = str(last.get("message") or "")
    lowered = message.lower()
    found = next((t for t in corruption_texts if t in lowered), None)
    if found is not None:
        return f"data corrupt: the store refused to start ({found!r} in its last exit)"
    restarts = int(store.get("restartCount") or 0) - baseline
    if restarts >= threshold and "running" not in (store.get("state") or {}):
        return f"the store crash-loops: {restarts} restarts without serving (threshold {threshold})"
    return None


class Act(Enum):
    NONE = "none"  # nothing asked, nothing under way
    RECORD = "record"  # only (re)write the progress record: waiting, or rejoining
    HAND_OFF = "hand-off"  # we lead: move leadership to `target` first
    REMOVE = "remove"  # MemberRemove of our own member through another member, under the lock
    FINISH = "finish"  # the new member votes (or the request was withdrawn): clear the annotations


@dataclass(frozen=True)
class ReplaceDecision:
    act: Act
    phase: str
    reason: str
    target: int | None = None  # HAND_OFF: the member to lead next


@dataclass(frozen=True)
class ReplaceView:
    """What the sidecar knows when it decides the next step of a replacement."""

    requested: bool
    progress: Progress | None
    own_id: int | None  # our member now (None between leaving and joining again)
    members: Sequence[Member]  # an authoritative MemberList
    statuses: Mapping[int, Status | None]  # None: did not answer
    size: int  # the ordinals the workload keeps: how many voters a whole cluster has
    leading: bool
    hand_off: bool  # Capabilities.hand_off
    target: int | None  # leave.transfer_target, if we lead
    diagnosis: str | None = None  # why our member needs replacing without being asked (diagnose, or the leader's verdict)
    automatic: bool = False  # spec.repair.policy Automatic
    doubtful: bool = False  # the diagnosis is a suspicion: only a person's request replaces the member
    alarms: Sequence[Alarm] = ()  # the cluster's active alarms (a CORRUPT one refuses the lock)
    lock_held: bool = False  # a membership lock key exists (read only under a CORRUPT alarm naming us)


def decide(view: ReplaceView) -> ReplaceDecision:
    """The next step; one membership change at a time, never one that loses quorum."""
    P = contract.ReplacePhase
    own = next((m for m in view.members if m.id == view.own_id), None) if view.own_id is not None else None
    old = view.progress.old_member if view.progress else ""
    if old and own is not None and own.hex_id != old:  # the member that replaces the old one
        if own.started and not own.is_learner:
            return ReplaceDecision(Act.FINISH, P.DONE, f"member {old} was replaced by {own.hex_id}, which votes")
        return ReplaceDecision(Act.RECORD, P.LEARNER, f"new member {own.hex_id} is a learner, catching up")
    if old and own is None:
        return ReplaceDecision(Act.RECORD, P.REJOINING, f"member {old} left Raft; joining again as a new member "
                                                        f"on fresh data (the old data is kept aside)")
    automatic = not view.requested and view.diagnosis is not None and view.automatic and not view.doubtful
    if not view.requested and not automatic:
        if view.diagnosis is not None:
            alarmed = view.own_id is not None and any(
                a.kind is AlarmKind.CORRUPT and a.member_id == view.own_id for a in view.alarms)
            who = ("spec.repair.policy is Manual:" if not view.doubtful else
                   "a person decides: disarm an alarm raised in error (etcdctl alarm disarm), or" if alarmed else
                   "a person decides: compare the members' data (etcdctl endpoint hashkv), and if this copy is bad")
            return ReplaceDecision(Act.RECORD, P.NEEDED, f"{view.diagnosis}; {who} annotate the pod "
                                                         f"{contract.ANNOTATION_REPLACE}=true to replace its member")
        if view.progress is not None:
            return ReplaceDecision(Act.FINISH, P.WITHDRAWN, "the request was withdrawn before the member left")
        return ReplaceDecision(Act.NONE, "", "nothing asked")
    decision = _step(view, own)
    if automatic:
        return ReplaceDecision(decision.act, decision.phase, f"{view.diagnosis}: {decision.reason}",
                               decision.target)
    return decision


def _step(view: ReplaceView, own: Member | None) -> ReplaceDecision:
    """The next step of a replacement that was asked for (or is automatic)."""
    P = contract.ReplacePhase
    if own is None:
        return ReplaceDecision(Act.RECORD, P.QUEUED, "this pod's member is not known yet")
    name = own.hex_id
    pending = [m for m in view.members if m.is_learner or not m.started]
    if pending:
        return ReplaceDecision(Act.RECORD, P.QUEUED, f"member {pending[0].hex_id} is still joining: "
                                                      f"one membership change at a time")
    voters = [m for m in view.members if not m.is_learner]
    if len(voters) < view.size:
        return ReplaceDecision(Act.RECORD, P.QUEUED, f"the cluster has {len(voters)} voters for {view.size} "
                                                      f"ordinals: another replacement is under way")
    if not may_remove(view.members, view.statuses, own.id):
        healthy = sum(1 for m in voters if view.statuses.get(m.id) is not None)
        return ReplaceDecision(Act.RECORD, P.WAITING, f"removing member {name} would lose quorum "
                                                      f"({healthy} of {len(voters)} voters answer)")
    blocked = corruption.lock_blocked(view.alarms, own.id, view.lock_held)
    if blocked is not None:
        return ReplaceDecision(Act.RECORD, P.WAITING, blocked)
    if view.leading and view.hand_off:
        if view.target is None:
            return ReplaceDecision(Act.RECORD, P.WAITING, f"member {name} leads and no healthy voter can "
                                                          f"take over")
        return ReplaceDecision(Act.HAND_OFF, P.HANDING_OFF, f"member {name} leads: moving leadership to "
                                                            f"{view.target:x} first", view.target)
    return ReplaceDecision(Act.REMOVE, P.REMOVING, f"removing member {name} from Raft; it joins again as a new "
                                                   f"learner on fresh data")


def next_progress(read: Progress | None, recorded: Progress | None, phase: str, reason: str,
                  own_id: int | None, cause: str = "", new_id: str = "") -> Progress | None:
    """The record to write on our pod for this step, or None when the pod shows it already.

    `read` is the record as the pod showed it this round, `recorded` what this sidecar wrote
    since (newer). The record keeps the old member's id (the first one seen) and every phase
    so far, so the operator can narrate a short step it missed, and the first `cause` given;
    a record that begins here is called `new_id`.
    """
    current = advanced(read, recorded, phase, reason, own_id, cause, new_id)
    return None if current in (read, recorded) else current


def advanced(read: Progress | None, recorded: Progress | None, phase: str, reason: str,
             own_id: int | None, cause: str = "", new_id: str = "") -> Progress:
    """The record with `phase` as its latest step (next_progress); also the finished record (Done, Withdrawn)
    that stays on the pod for the operator to tell."""
    P = contract.ReplacePhase
    progress = recorded if recorded is not None else read
    old = progress.old_member if progress and progress.old_member else (f"{own_id:x}" if own_id else "")
    new = f"{own_id:x}" if own_id is not None and f"{own_id:x}" != old else ""
    steps = progress.steps if progress else ()
    if phase == P.DONE and new and P.LEARNER not in steps:
        # Every new member joins as a learner; promoted before this sidecar looked, it is a step all the same.
        steps = (*steps, P.LEARNER)
    if not steps or steps[-1] != phase:
        steps = (*steps, phase)
    cause = progress.cause if progress and progress.cause else cause
    return Progress(phase=phase, old_member=old, new_member=new, reason=reason, steps=steps, cause=cause,
                    id=progress.id if progress else new_id)


def lost_volume(old_id: int, found: str, new_id: str) -> Progress:
    """The record the join leaves once it removed the member whose data our pod lost: from here the
    replacement goes on as any other (the new member joins as a learner, then votes)."""
    P = contract.ReplacePhase
    return Progress(phase=P.REJOINING, old_member=f"{old_id:x}", new_member="",
                    reason=f"member {old_id:x} left Raft; joining again as a new member on fresh data",
                    steps=(P.REMOVING, P.REJOINING), cause=f"lost volume: {found}", id=new_id)


def premise_failed(own_id: int | None, local_answers: bool, members: Sequence[Member] | None,
                   linearizable: bool) -> str | None:
    """Why the join must be decided again (fault c), or None.

    The join decided to run as member `own_id`; once an authoritative MemberList no longer
    lists it (removed by a replacement, by clean, or by hand) and our store has stopped
    (etcd exits with "member removed"), starting the store again can only fail. Never on a
    lagging answer, never while our store still answers.
    """
    if own_id is None or local_answers or members is None or not linearizable:
        return None
    if any(m.id == own_id for m in members):
        return None
    return f"member {own_id:x} is no longer in the cluster and its store has stopped"
