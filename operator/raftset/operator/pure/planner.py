"""Scale planning: one membership change per step, and never the leader on Advanced StatefulSet.

A pure function of what the API says (desired replicas, the workload's current scale
fields and the step it records, the Raft membership the leader published, the members'
heartbeat records and the time), so a restarted operator computes the same next step
from the same objects and never removes a member twice.

Raft is the truth about who is a member; heartbeats say who is alive and who leads. A
step is done when Raft says so: a scale-in when the victim's member ID is absent from a
membership read after the step began, a scale-out when the new member votes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from raftset import contract
from raftset.contract import quorum
from raftset.membership import RaftMember, RaftMembership
from raftset.operator.pure.scale_step import SCALE_IN, SCALE_OUT, ScaleStep
from raftset.operator.pure.heartbeats import HeartbeatRecord
from raftset.operator.pure.objects import Incarnation
from raftset.times import parse_rfc3339, rfc3339
from raftset.workloads import Backend, being_deleted, kept_ordinals
from raftset.operator.pure.events import Event


# The Event / condition reason of each step that changes the workload.
STEP_REASONS = {"create": "Creating", SCALE_IN: "ScalingIn", SCALE_OUT: "ScalingOut", "roll": "RollingMember"}
# The Degraded reason of a step Raft has not confirmed within the stuck period.
STUCK_REASONS = {SCALE_IN: "LeaveStuck", SCALE_OUT: "JoinStuck"}
# Past this, an unconfirmed step is reported: above the sidecar's leave timeout (45 s)
# plus a few heartbeat refreshes, below membership-clean's default grace (300 s).
STUCK_AFTER_SECONDS = 120.0


@dataclass(frozen=True)
class Plan:
    """The workload scale to write now, and why."""

    replicas: int
    reserved: tuple[int, ...]
    action: str  # "create" | "steady" | "wait" | "scale-out" | "scale-in" | "roll" (raftset.operator.pure.rolls)
    message: str
    scale_away: tuple[str, ...] = ()  # pods to mark with contract.ANNOTATION_SCALE_AWAY
    restart: tuple[Incarnation, ...] = ()  # pods to delete so that they come back on the new template
    hand_off_from: str | None = None  # the leader pod that goes in this step
    # Whether that leader's sidecar hands leadership away first (the engine's Capabilities.hand_off).
    # Without it (Xline) the leader just stops and the others elect one: writes stall meanwhile.
    hand_off: bool = True
    refused: bool = field(default=False)
    record: ScaleStep | None = None  # the step Raft has yet to confirm, written on the workload
    stuck: str | None = None  # a STUCK_REASONS value once that step is overdue

    @property
    def kept(self) -> list[int]:
        return kept_ordinals(self.replicas, self.reserved)

    def step_events(self) -> list[Event]:
        """(type, reason, message) of the Events that announce a step once it is taken; none otherwise."""
        if self.action not in STEP_REASONS:
            return []
        events = [Event("Normal", STEP_REASONS[self.action], self.message)]
        if self.hand_off_from:
            going = "restarted on the new template" if self.restart else "scaled away"
            if self.hand_off:
                events.append(Event("Normal", "LeaderHandOff",
                               f"{self.hand_off_from} is the leader and is being {going}: "
                               f"its sidecar moves leadership to a follower before its store stops"))
            else:
                events.append(Event("Warning", NO_HAND_OFF_REASON,
                               f"{self.hand_off_from} is the leader and is being {going} without a leadership "
                               f"hand-off: {NO_HAND_OFF}"))
        return events


# A leader that goes on an engine without a safe MoveLeader (Capabilities.hand_off False): said in the
# step's message (so in the Progressing condition) and in a Warning Event, because it costs an election.
NO_HAND_OFF_REASON = "LeaderLeavesWithoutHandOff"
NO_HAND_OFF = ("this engine has no safe MoveLeader, so the other members elect a new leader after its store "
               "stops and writes stall until they do; the Advanced StatefulSet backend (workloadKind "
               "AdvancedStatefulSet) keeps the leader on scale-in")


def leader_going(hand_off: bool) -> str:
    """What the step message says of a leader that goes: hand-off first, or an election after."""
    if hand_off:
        return "it is the leader and hands leadership away first"
    return "it is the leader and leaves without a hand-off: an election follows"


def _normalise(replicas: int, reserved: Iterable[int]) -> tuple[int, ...]:
    """Drop reservations above the highest running ordinal: they change nothing."""
    skipped = set(reserved)
    if not skipped:
        return ()
    top = max(kept_ordinals(replicas, skipped), default=-1)
    return tuple(sorted(o for o in skipped if o < top))


@dataclass(frozen=True)
class Membership:
    """How the members' heartbeat records compare with the ordinals the workload runs."""

    learners: tuple[str, ...]  # pods still joining
    missing: tuple[int, ...]  # kept ordinals without a fresh, healthy voter
    extra: tuple[int, ...]  # fresh records of ordinals the workload no longer runs
    voters: tuple[int, ...]  # kept ordinals with a fresh, healthy voter
    outside_raft: tuple[str, ...] = ()  # "pod (member id)" of fresh records whose member Raft does not list

    @property
    def healthy_voters(self) -> int:
        return len(self.voters)

    @property
    def settled(self) -> bool:
        return not (self.learners or self.missing or self.extra)

    def describe(self) -> str:
        if self.outside_raft:
            return (f"waiting for {', '.join(self.outside_raft)}: its heartbeat names a member that Raft does not "
                    "list (it left Raft, or was removed, while its pod kept running); it is no voter until its "
                    "sidecar joins it again as a new member")
        if self.learners:
            return f"waiting for learner {', '.join(self.learners)} to be promoted"
        if self.extra:
            return f"waiting for ordinal {_join(self.extra)} to leave the cluster"
        if self.missing:
            return f"waiting for ordinal {_join(self.missing)} to join and report healthy"
        return "membership matches the workload"


@dataclass(frozen=True)
class RaftState:
    """How the published Raft membership compares with the ordinals the workload runs."""

    learners: tuple[RaftMember, ...]
    not_voting: tuple[int, ...]  # kept ordinals without a started voter in Raft
    extra: tuple[RaftMember, ...]  # members of ordinals the workload no longer runs

    @property
    def settled(self) -> bool:
        return not (self.learners or self.not_voting or self.extra)

    def describe(self) -> str:
        if self.learners:
            return "waiting for learner " + ", ".join(_member(m) for m in self.learners) + " to be promoted in Raft"
        if self.extra:
            return "waiting for " + ", ".join(_member(m) for m in self.extra) + " to leave Raft"
        if self.not_voting:
            return f"waiting for ordinal {_join(self.not_voting)} to become a voter in Raft"
        return "Raft membership matches the workload"


def _member(m: RaftMember) -> str:
    return f"member {m.id} (ordinal {m.ordinal})"


def raft_state(kept: Sequence[int], raft: RaftMembership) -> RaftState:
    """Members whose ordinal cannot be read (added by hand) are neither extra nor missing."""
    voting = {m.ordinal for m in raft.members if m.voter}
    return RaftState(
        learners=tuple(m for m in raft.members if m.learner),
        not_voting=tuple(o for o in kept if o not in voting),
        extra=tuple(m for m in raft.members if m.ordinal is not None and m.ordinal not in kept),
    )


def confirmed(step: ScaleStep, raft: RaftMembership | None) -> str | None:
    """None when Raft confirms `step`; else what it still waits for."""
    if raft is None or raft.index < step.after_index:
        return f"waiting for a Raft membership read after {step.pod} was {_done_word(step)}"
    ordinal = contract.ordinal_of(step.pod)
    if step.action == SCALE_IN:
        present = raft.by_id(step.member_id) if step.member_id else raft.by_ordinal(ordinal)
        if present is None:
            return None
        return f"waiting for {step.pod} (member {present.id}) to leave Raft"
    member = raft.by_ordinal(ordinal)
    if member is not None and member.voter:
        return None
    return f"waiting for {step.pod} to become a voter in Raft"


def _done_word(step: ScaleStep) -> str:
    return "scaled away" if step.action == SCALE_IN else "added"


def _seconds_since(started: str, now: datetime) -> float:
    """Both ends are the operator's clock; an unreadable start counts as just now."""
    moment = parse_rfc3339(started)
    return (now - moment).total_seconds() if moment else 0.0


def _join(ordinals: Iterable[int]) -> str:
    return ", ".join(map(str, ordinals))


def membership(kept: Sequence[int], heartbeats: Iterable[HeartbeatRecord], now: datetime,
               raft: RaftMembership | None = None) -> Membership:
    """Who votes, by the heartbeats; where the leader published a membership, a heartbeat counts as a
    voter only if Raft lists its member as one: a Lease outlives a member removed behind its back."""
    fresh = [m for m in heartbeats if m.fresh(now)]
    raft_voters = None if raft is None else {m.id for m in raft.members if m.voter}
    listed = None if raft is None else {m.id for m in raft.members}
    voters = {m.ordinal for m in fresh if m.voting and m.healthy
              and (raft_voters is None or m.member_id in raft_voters)}
    outside = () if listed is None else tuple(sorted(
        f"{m.pod} (member {m.member_id})" for m in fresh if m.member_id and m.member_id not in listed))
    return Membership(
        learners=tuple(sorted(m.pod for m in fresh if m.role == contract.ROLE_LEARNER)),
        missing=tuple(sorted(set(kept) - voters)),
        extra=tuple(sorted({m.ordinal for m in fresh} - set(kept))),
        voters=tuple(sorted(voters & set(kept))),
        outside_raft=outside,
    )


def leader(heartbeats: Iterable[HeartbeatRecord], now: datetime) -> HeartbeatRecord | None:
    """The freshest member that reports itself leader (two may briefly overlap after an election)."""
    leaders = [m for m in heartbeats if m.fresh(now) and m.role == contract.ROLE_LEADER]
    # The ordinal breaks a tie so that the order of the records never changes the plan.
    return max(leaders, key=lambda m: (m.renewed, m.ordinal), default=None)


def undisputed_leader(heartbeats: Sequence[HeartbeatRecord], raft: RaftMembership | None,
                      now: datetime) -> HeartbeatRecord | None:
    """The leader to plan a removal or a restart around: `leader`, unless newer evidence says it was
    deposed. After a hand-off or an election the old leader's heartbeat names it leader until its
    sidecar next samples its member; meanwhile another member's heartbeat may already carry the new,
    higher Raft term, or the new leader's sidecar may have published the membership with itself as
    leader. Either way the claim is stale: None, so that the caller waits for the new leader to report.
    A record without a term (0: from a sidecar that did not report one) is taken as it is."""
    current = leader(heartbeats, now)
    if current is None or not current.raft_term:
        return current
    newest = max((m.raft_term for m in heartbeats if m.fresh(now)), default=0)
    if raft is not None:
        if raft.term == current.raft_term and raft.leader and raft.leader != current.pod:
            return None  # one term, two leaders named: wait until the records agree
        newest = max(newest, raft.term)
    return None if newest > current.raft_term else current


def _victim_order(candidates: Iterable[int], by_ordinal: dict[int, HeartbeatRecord], now: datetime) -> list[int]:
    """Who goes first: no or stale record, unhealthy, learners, then the highest ordinals."""

    def rank(ordinal: int) -> tuple[int, int]:
        member = by_ordinal.get(ordinal)
        if member is None or not member.fresh(now):
            tier = 0
        elif not member.healthy:
            tier = 1
        elif member.role == contract.ROLE_LEARNER:
            tier = 2
        else:
            tier = 3
        return tier, -ordinal

    return sorted(candidates, key=rank)


def first_scale(backend: Backend, desired: int, raft: RaftMembership | None,
                heartbeats: Sequence[HeartbeatRecord]) -> Plan:
    """The scale a workload is created with.

    A new cluster starts at full size: the sidecars serialise the joins themselves. A
    workload deleted and re-created under a running cluster (issue 11 g) must not renumber
    its members: it keeps exactly the ordinals that still have members, by the last Raft
    membership the leader published (it outlives the workload), else by the heartbeat
    records, stale ones included; the holes between them stay reserved where the backend
    honours reservations. Later steps then scale to `desired` one member at a time.
    """
    if raft is not None:
        known = sorted({m.ordinal for m in raft.members if m.ordinal is not None})
    else:
        known = sorted({m.ordinal for m in heartbeats})
    if not known:
        return Plan(desired, (), "create", f"creating {desired} members")
    holes = set(range(known[-1] + 1)) - set(known)
    reserved = _normalise(len(known), backend.honoured(holes))
    kept = kept_ordinals(len(known), reserved)
    message = f"re-creating the workload with the ordinals that have members ({_join(known)})"
    if reserved:
        message += f", holding {_join(reserved)} empty"
    if kept != known:
        message += f"; {backend.name} cannot hold holes, so it runs {_join(kept)}"
    return Plan(len(known), reserved, "create", message)


def plan(
    cluster: str,
    backend: Backend,
    desired: int,
    current: tuple[int, Sequence[int]] | None,
    heartbeats: Sequence[HeartbeatRecord],
    raft: RaftMembership | None,
    now: datetime,
    *,
    pending: ScaleStep | None = None,
    stuck_after: float = STUCK_AFTER_SECONDS,
    hand_off: bool = True,
    serving: frozenset[int] | None = None,
) -> Plan:
    """The next scale step.

    `current` is the workload's (replicas, reserveOrdinals), or None before it exists;
    `raft` the membership the leader published (None while there is none); `pending` the
    step recorded on the workload; `hand_off` the engine's Capabilities.hand_off; `serving`
    the ordinals whose pod the API listed Running and not terminating for this step
    (`serving_ordinals`), None where the pods were not read.
    """
    if current is None:
        return first_scale(backend, desired, raft, heartbeats)

    replicas, raw_reserved = current
    reserved = _normalise(replicas, backend.honoured(raw_reserved))
    if pending is not None:
        waiting = confirmed(pending, raft)
        if waiting is not None:
            overdue = _seconds_since(pending.started, now)
            if overdue < stuck_after:
                return Plan(replicas, reserved, "wait", waiting, record=pending)
            # The same words every round: the message is the Degraded condition's, whose change is an Event.
            return Plan(replicas, reserved, "wait",
                        f"{waiting}: not confirmed within {stuck_after:.0f} s of the step's start at "
                        f"{pending.started} (its {'leave' if pending.action == SCALE_IN else 'join'} was refused "
                        f"or never ran); no further step until it is", record=pending,
                        stuck=STUCK_REASONS[pending.action])
    if desired == replicas:
        return Plan(replicas, reserved, "steady", f"{replicas} members as desired")
    if raft is None:
        return Plan(replicas, reserved, "wait", "waiting for the leader's sidecar to publish the Raft membership")

    unobserved = awaiting_renewal(heartbeats, now)
    if unobserved is not None:
        return Plan(replicas, reserved, "wait", unobserved)
    kept = kept_ordinals(replicas, reserved)
    state = membership(kept, heartbeats, now)  # the waits compare heartbeats and Raft (`truth`) each on its own
    truth = raft_state(kept, raft)

    if desired > replicas:
        if not state.settled:
            return Plan(replicas, reserved, "wait", state.describe())
        if not truth.settled:
            return Plan(replicas, reserved, "wait", truth.describe())
        # Re-fill the lowest reserved ordinal first so ordinals stay compact.
        new_reserved = tuple(sorted(reserved)[1:])
        step = replicas + 1
        added = sorted(set(kept_ordinals(step, new_reserved)) - set(kept))
        new_pod = contract.pod_name(cluster, added[0])
        return Plan(step, _normalise(step, new_reserved), SCALE_OUT,
                    f"adding ordinal {added[0]} ({replicas} -> {step} members)",
                    record=ScaleStep(SCALE_OUT, new_pod, "", raft.index, rfc3339(now)))

    # Scale-in may start with unhealthy members (they are the first to go), but never
    # while the previous victim is still leaving (by its heartbeat or in Raft), another
    # member is joining, or without a leader to protect.
    if state.extra:
        return Plan(replicas, reserved, "wait", state.describe())
    if truth.extra:
        return Plan(replicas, reserved, "wait", truth.describe())
    current_leader = undisputed_leader(heartbeats, raft, now)
    if current_leader is None:
        return Plan(replicas, reserved, "wait", "waiting for a leader before removing a member"
                    + ("" if leader(heartbeats, now) is None else
                       ": the one a heartbeat names was deposed (a newer Raft term or membership says so), "
                       "and the new one has not reported yet"))
    step = replicas - 1
    by_ordinal = {m.ordinal: m for m in heartbeats}
    # Where the backend lets us choose, the leader stays; where it does not (the builtin
    # StatefulSet's highest ordinal), its sidecar hands leadership away on preStop first.
    removable = backend.removable(kept)
    followers = [o for o in removable if o != current_leader.ordinal] or removable
    victim = _victim_order(followers, by_ordinal, now)[0]
    new_reserved = _normalise(step, backend.honoured((*reserved, victim)))
    victim_pod = contract.pod_name(cluster, victim)
    # A joining learner may itself be scaled away, but no other member leaves meanwhile:
    # one membership change at a time.
    joining = tuple(p for p in state.learners if p != victim_pod)
    if joining:
        return Plan(replicas, reserved, "wait",
                    f"waiting for learner {', '.join(joining)} to be promoted")
    raft_joining = tuple(m for m in truth.learners if m.ordinal != victim)
    if raft_joining:
        return Plan(replicas, reserved, "wait", "waiting for learner "
                    + ", ".join(_member(m) for m in raft_joining) + " to be promoted in Raft")
    # The quorum guard counts a member healthy only where its heartbeat and Raft both call it a
    # voter, and against the voters Raft has now: the victim's store may stop before its
    # MemberRemove commits (a leave that times out), and it is one of them until then.
    # A fresh heartbeat outlives its pod by up to a Lease duration: where the pods were read for
    # this step (`serving`), a voter whose pod is terminating, Pending or gone is down (a drain's
    # eviction in the same second).
    voting = membership(kept, heartbeats, now, raft)
    voters = sum(1 for m in raft.members if m.voter)
    healthy = [o for o in voting.voters if o != victim]
    down = [] if serving is None else [o for o in healthy if o not in serving]
    left = len(healthy) - len(down)
    if left < quorum(voters):
        then = ("waiting for the cluster to recover" if voters - 1 >= quorum(voters)
                else f"no member can leave a cluster of {voters} voters this way, healthy or not")
        pods = "".join(f"; {contract.pod_name(cluster, o)} not serving: its pod is terminating, Pending or gone"
                       for o in down)
        return Plan(replicas, reserved, "wait",
                    f"removing ordinal {victim} now could leave {left} healthy of {voters} voters (its store "
                    f"may stop before its removal commits), fewer than the {quorum(voters)} a quorum needs{pods}; "
                    f"{then}", refused=True)
    leaving = victim_pod if victim == current_leader.ordinal else None
    message = f"removing {victim_pod} ({replicas} -> {step} members)"
    if leaving:
        message += f"; {leader_going(hand_off)}"
    else:
        message += f", keeping leader {current_leader.pod}"
    victim_entry = raft.by_ordinal(victim)
    record = ScaleStep(SCALE_IN, victim_pod, victim_entry.id if victim_entry else "", raft.index, rfc3339(now))
    return Plan(step, new_reserved, SCALE_IN, message, scale_away=(victim_pod,),
                hand_off_from=leaving, hand_off=hand_off, record=record)


def serving_ordinals(pods: Iterable[Mapping[str, Any]], cluster: str,
                     disrupted: Mapping[str, str] | None = None) -> frozenset[int]:
    """The ordinals whose member pod the API lists Running and not terminating (strays ignored), but for
    the pods `disrupted` (a budget's `disruptedPods`: name -> when the Eviction API let it go), whose
    deletion may not be written yet; a pod created after that moment is a new one of the same name."""
    found = set()
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = str(meta.get("name", ""))
        ordinal = contract.member_ordinal(cluster, name)
        if ordinal is not None and not _evicted(meta, (disrupted or {}).get(name)) and not being_deleted(pod) \
                and (pod.get("status") or {}).get("phase") == "Running":
            found.add(ordinal)
    return frozenset(found)


def _evicted(meta: Mapping[str, Any], disrupted_at: str | None) -> bool:
    """An unreadable time on either side counts as evicted: the guard then waits for the entry to go."""
    if disrupted_at is None:
        return False
    created, evicted = parse_rfc3339(meta.get("creationTimestamp")), parse_rfc3339(disrupted_at)
    return created is None or evicted is None or created <= evicted


def stale_marks(cluster: str, plan: Plan, marked_pods: Iterable[str]) -> list[str]:
    """Marked member pods the plan keeps after all (it changed its mind): their mark must go.

    A marked pod not named like a member of `cluster` is a stray: left alone."""
    kept = set(plan.kept)
    return sorted(p for p in marked_pods
                  if contract.member_ordinal(cluster, p) in kept and p not in plan.scale_away)


def awaiting_renewal(heartbeats: Iterable[HeartbeatRecord], now: datetime) -> str | None:
    """Why no member may be added, removed or restarted yet: a heartbeat is only first-seen.

    Right after an operator restart every Lease is first-seen (raftset.operator.pure.freshness),
    and a dead member's would look fresh for one Lease duration. The wait ends at the
    member's next renewal (one refresh interval) or when its unrenewed record expires.
    """
    unconfirmed = sorted(m.pod for m in heartbeats if m.fresh(now) and not m.confirmed)
    if not unconfirmed:
        return None
    return (f"waiting to observe a heartbeat renewal of {', '.join(unconfirmed)} (a Lease counts as fresh "
            f"for its duration after the operator saw it renewed, on the operator's clock)")
