"""Space and alarms: what the leader's sidecar does next about compaction, defragmentation and alarms.

Pure. Only the leader's sidecar acts (the same single actor as membership-clean), one
action per round, and a round is decided afresh from what the members answer now plus a
small `Run` the acting sidecar keeps in memory (a new leader starts over, which repeats at
most one idempotent compaction or defragmentation).

* NOSPACE (some member's backend reached its quota; the whole cluster refuses writes):
  compact the history up to the current revision, defragment one member at a time (learners
  and followers first, the leader last) so that the freed pages go back to the file
  system (etcd's quota counts the file), then disarm. If the live data alone still fills the quota, disarming would only
  raise the alarm again: that is reported instead (delete keys or raise the quota).
* CORRUPT (a member's data disagrees with the others'): never repaired in place, and left out of
  every defragmentation. raftset.sidecar.pure.corruption judges it and hands it to member replacement.
* `spec.maintenance.defrag`: a cron schedule (every member, leader last) or a threshold
  (the members whose free pages exceed it, leader last).

An engine that cannot defragment (Xline) gets the compaction and the disarm only.
A routine defragmentation waits while the other members would not keep a quorum without the
member; under NOSPACE (writes refused already) a quorum that answers is enough.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

from raftset.contract import quorum
from raftset.sidecar.pure.etcd import Alarm, AlarmKind, Member, Status

# Above this share of the quota in use after compaction and defragmentation, the data itself
# fills the quota: disarming would raise NOSPACE again at the next write.
FULL_AFTER_RECLAIM = 0.95

NOSPACE = "NOSPACE"
SCHEDULE = "schedule"
THRESHOLD = "threshold"


@dataclass(frozen=True)
class Policy:
    """spec.maintenance.defrag, as the sidecar's environment carries it."""

    schedule: str = ""  # cron; "" = no schedule
    threshold_percent: int = 0  # 0 = off
    min_bytes: int = 64 * 1024 * 1024  # free pages below this are never worth a defragmentation
    can_defragment: bool = True  # the engine implements Maintenance.Defragment


@dataclass(frozen=True)
class Run:
    """One episode in progress; what the acting sidecar remembers between rounds."""

    cause: str = ""  # "" = none | NOSPACE | SCHEDULE | THRESHOLD
    compacted: bool = False
    done: frozenset[int] = frozenset()  # members defragmented (or skipped) in this run
    reported: frozenset[tuple[int, str]] = frozenset()  # (member, what) already narrated once

    @property
    def active(self) -> bool:
        return bool(self.cause)


class Kind(Enum):
    NONE = "none"
    COMPACT = "compact"
    DEFRAGMENT = "defragment"
    DISARM = "disarm"
    FINISHED = "finished"  # a scheduled or threshold run is over
    REPORT = "report"  # narrate once, act on nothing


@dataclass(frozen=True)
class MaintenanceAction:
    kind: Kind
    message: str
    reason: str = ""  # the Event reason; "" = nothing to narrate
    warning: bool = False
    member_id: int | None = None
    alarms: tuple[Alarm, ...] = ()  # DISARM: these
    run: Run = field(default_factory=Run)  # the run after this action succeeds


def schedule_error(schedule: str) -> str | None:
    """Why a cron expression is unusable, or None."""
    if not schedule:
        return None
    from croniter import croniter  # noqa: PLC0415 - only with a schedule (raftset.backups says why)

    return None if croniter.is_valid(schedule) else f"not a cron expression: {schedule!r}"


def next_scheduled(schedule: str, after: datetime) -> datetime | None:
    """When the schedule next fires after `after`; None without a (valid) schedule."""
    if not schedule or schedule_error(schedule):
        return None
    from croniter import croniter  # noqa: PLC0415 - only with a schedule (raftset.backups says why)

    return croniter(schedule, after).get_next(datetime)


def idle(alarms: Sequence[Alarm], schedule_due: bool, run: Run, policy: Policy) -> bool:
    """Nothing could be due this round (no alarm, no scheduled run due or under way, no
    threshold to check): the leader spares the members their Status calls."""
    return not alarms and not schedule_due and not run.active and policy.threshold_percent == 0


def started_scheduled_run(schedule_due: bool, before: Run, after: Run) -> bool:
    """This round's action began the scheduled run that was due: the next one is counted from now."""
    return schedule_due and before.cause != SCHEDULE and after.cause == SCHEDULE


def _order(members: Sequence[Member], leader_id: int) -> list[Member]:
    """Learners, then followers by id, the leader last."""
    return sorted(members, key=lambda m: (m.id == leader_id, not m.is_learner, m.id))


def _fragmented(st: Status, policy: Policy) -> bool:
    if not st.db_size or st.fragmented_bytes < policy.min_bytes:
        return False
    return st.fragmented_bytes * 100 >= policy.threshold_percent * st.db_size


def _name(member: Member) -> str:
    return member.name or member.hex_id


def decide(*, leader_id: int, members: Sequence[Member], statuses: dict[int, Status | None],
           alarms: Sequence[Alarm], run: Run, policy: Policy, schedule_due: bool,
           quota: int = 0) -> MaintenanceAction:
    """The next action of the leader's sidecar. `quota` is the backend quota in bytes (0: unknown)."""
    by_id = {m.id: m for m in members}
    corrupt = sorted({a.member_id for a in alarms if a.kind is AlarmKind.CORRUPT})
    nospace = tuple(a for a in alarms if a.kind is AlarmKind.NOSPACE)
    if nospace:
        if run.cause != NOSPACE:
            run = Run(cause=NOSPACE, reported=run.reported)
        if not run.compacted:
            return MaintenanceAction(Kind.COMPACT, "the NOSPACE alarm is raised and writes are refused: compacting the "
                          "key history up to the current revision", reason="Compacting", warning=True,
                          run=dataclasses.replace(run, compacted=True))
        step = _next_defragmentation(leader_id, members, statuses, run, policy, corrupt)
        if step is not None:
            return step
        leader = statuses.get(leader_id)
        if quota and leader is not None and (leader.db_size_in_use or leader.db_size) >= FULL_AFTER_RECLAIM * quota:
            key = (leader_id, "full")
            message = (f"the data itself fills the backend quota ({leader.db_size_in_use or leader.db_size} of "
                       f"{quota} bytes in use after compaction): the NOSPACE alarm stays; delete keys, or raise "
                       f"quota-backend-bytes in spec.options (with spec.storage.size)")
            if key in run.reported:
                return MaintenanceAction(Kind.NONE, message, run=run)
            return MaintenanceAction(Kind.REPORT, message, reason="QuotaExhausted", warning=True,
                          run=dataclasses.replace(run, reported=run.reported | {key}))
        return MaintenanceAction(Kind.DISARM, "space reclaimed on every member: disarming the NOSPACE alarm",
                      reason="AlarmDisarmed", alarms=nospace, run=Run(reported=run.reported))
    if run.cause == NOSPACE:  # disarmed by someone else, or by us in a round that then failed
        run = Run(reported=run.reported)
    if not policy.can_defragment:
        return MaintenanceAction(Kind.NONE, "the engine cannot defragment", run=run)
    if not run.active:
        answering = {i: st for i, st in statuses.items() if st is not None and i in by_id}
        if schedule_due:
            run = Run(cause=SCHEDULE, reported=run.reported)
        elif policy.threshold_percent > 0:
            over = sorted(_name(by_id[i]) for i, st in answering.items() if _fragmented(st, policy))
            if not over:
                return MaintenanceAction(Kind.NONE, "no member is fragmented past the threshold", run=run)
            # Armed: the run starts next round, when every member has applied what fragmented the
            # first (a compaction reaches the followers a little after the leader).
            return MaintenanceAction(Kind.NONE, f"{', '.join(over)} past the threshold: defragmenting from the next round",
                          run=Run(cause=THRESHOLD, reported=run.reported))
        else:
            return MaintenanceAction(Kind.NONE, "nothing to do", run=run)
    step = _next_defragmentation(leader_id, members, statuses, run, policy, corrupt)
    if step is not None:
        return step
    return MaintenanceAction(Kind.FINISHED, f"defragmentation ({run.cause}) finished on every member",
                  reason="DefragmentationFinished", run=Run(reported=run.reported))


def _next_defragmentation(leader_id: int, members: Sequence[Member], statuses: dict[int, Status | None],
                          run: Run, policy: Policy, corrupt: Sequence[int]) -> MaintenanceAction | None:
    """The next member of this run to defragment; None once every member is done (or cannot be)."""
    if not policy.can_defragment:
        return None
    pending = [m for m in _order(members, leader_id) if m.id not in run.done and m.id not in corrupt
               and m.started]
    if run.cause == THRESHOLD:  # only who is past it now: a follower that crossed later still goes before the leader
        pending = [m for m in pending if (st := statuses.get(m.id)) is not None and _fragmented(st, policy)]
    answering: Set[int] = {i for i, st in statuses.items() if st is not None}
    for member in pending:
        if member.id not in answering:
            continue  # skipped: nothing to defragment on a member that does not answer
        voters = {m.id for m in members if not m.is_learner}
        # Routine runs keep the cluster writable: the others must hold a quorum without the member
        # (a lone member has none to keep). Under NOSPACE writes are refused already: it is enough
        # that a quorum answers.
        spared = {member.id} if run.cause != NOSPACE and len(voters) > 1 else set()
        if len((voters & answering) - spared) < quorum(len(voters)):
            return MaintenanceAction(Kind.NONE, f"not defragmenting {_name(member)}: the other members would not keep "
                          f"a quorum while it is busy", run=run)
        role = "the leader, last" if member.id == leader_id else ("a learner" if member.is_learner else "a follower")
        return MaintenanceAction(Kind.DEFRAGMENT, f"defragmenting {_name(member)} ({role}; {run.cause})",
                      reason="Defragmenting", member_id=member.id,
                      run=dataclasses.replace(run, done=run.done | {member.id}))
    return None
