"""Quorum loss as the operator sees it: the pure decision (issue 12, item 2).

Inputs are what the API says now: the Raft membership the last leader published (who votes),
the heartbeat Leases (who still answers, with its committed and applied index: a member serves
Maintenance.Status without quorum), the user's request annotation, spec.recovery, the
quorum-loss record on the workload and the QuorumLost condition the status shows. Nothing is kept
in memory, so an operator restarted midway decides the same step again. The record names the
survivor; the sidecars do the rest (raftset.sidecar.pure.quorum_loss), and this module only reports,
starts, restarts the pods that started before the record, and ends the quorum loss once every
member votes again.

What a restarted operator must not trust: a heartbeat it has only seen once (it cannot tell a
live member from the last words of a dead one until it sees the Lease renewed:
raftset.operator.pure.freshness). Such a record neither leads, nor survives, nor votes here; while
one is pending the verdict waits (the condition the status shows stands). A voter that holds
data but does not answer Status cannot be ranked either: `auto` waits for it
(SurvivorsNotAnswering) rather than choose a survivor that may hold less.

What a loss needs (issue 30): Raft evidence, never stale Leases alone. A Lease that stopped
renewing says its sidecar cannot write to the API (a cut path to the apiserver, throttling, a
policy), not that Raft lost quorum. So a fresh, confirmed record of a voter whose member's
Status names a leader (its role is leader or follower) is evidence that Raft has a leader: the
cluster has quorum, whatever the other Leases say. A loss is reported only when some voter's
fresh record shows its store answering Status, or its sidecar running while its store does
not, and no fresh record names a leader; with no fresh record of any voter the operator cannot
tell, says so (Unknown, MembersUnseen) and starts nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from raftset import contract
from raftset.contract import quorum
from raftset.membership import RaftMembership
from raftset.operator.pure.heartbeats import HeartbeatRecord
from raftset.operator.pure.objects import Incarnation
from raftset.quorum_loss import QuorumLossRecord, Survivor, choose
from raftset.times import parse_rfc3339, rfc3339
from raftset.operator.pure.events import Condition, Event

CONDITION = "QuorumLost"
_STATUSES: dict[str, bool | None] = {"True": True, "False": False, "Unknown": None}  # as metav1.Condition spells them


@dataclass(frozen=True)
class QuorumView:
    cluster: str
    kind_short: str  # etcdc | xc: for the command the condition suggests
    replicas: int
    kept: Sequence[int]  # ordinals the workload runs
    raft: RaftMembership | None
    heartbeats: Sequence[HeartbeatRecord]
    request: str | None  # the raftset.dev/recover-quorum annotation
    policy: str  # Manual | Automatic
    grace_seconds: int
    lost_since: datetime | None  # when QuorumLost last turned True, if it is True
    record: QuorumLossRecord | None
    force_supported: bool
    now: datetime
    new_id: str = ""  # the id a recovery started now gets (the shell makes it up)
    previous: Condition | None = None  # the QuorumLost condition the status shows (previous_condition)
    announced: bool = False  # the start of `record` was narrated already (narrated, or its Event exists)


@dataclass(frozen=True)
class QuorumDecision:
    condition: Condition
    start: QuorumLossRecord | None = None  # write this record on the workload, then restart the pods
    finish: bool = False  # every member votes again: remove the record
    drop_request: bool = False  # the request was taken, refused or is the running recovery's own: remove it
    events: tuple[Event, ...] = field(default_factory=tuple)  # (type, reason, message)
    # The recovery's start Event, posted before the status names the recovery (so a restart that
    # finds the recovery in the status knows it was told), under a name of its own (so it is
    # never told twice): (type, reason, message).
    announce: Event | None = None


def _voter_ids(view: QuorumView) -> set[str] | None:
    return {m.id for m in view.raft.members if m.voter} if view.raft is not None else None


def _candidate(view: QuorumView, beat: HeartbeatRecord, voters: set[str] | None) -> bool:
    """A fresh record of a pod whose data holds a voting member (learners and empty pods never survive)."""
    if not beat.fresh(view.now) or not beat.member_id or beat.role == contract.ROLE_LEARNER:
        return False
    return voters is None or beat.member_id in voters


def survivors(view: QuorumView) -> list[Survivor]:
    """Voting members that answer Status (a raft term), on a heartbeat seen renewed."""
    voters = _voter_ids(view)
    return [Survivor(pod=b.pod, ordinal=b.ordinal, member_id=b.member_id, committed=b.raft_index, term=b.raft_term,
                     applied=b.applied_index)
            for b in view.heartbeats if _candidate(view, b, voters) and b.confirmed and b.raft_term > 0]


def silent(view: QuorumView) -> list[HeartbeatRecord]:
    """Voters whose sidecar runs (a heartbeat seen renewed) while their store does not answer Status:
    they hold data that cannot be ranked, so `auto` cannot know the most up-to-date survivor."""
    voters = _voter_ids(view)
    return [b for b in view.heartbeats if _candidate(view, b, voters) and b.confirmed and b.raft_term == 0]


def unseen(view: QuorumView) -> list[HeartbeatRecord]:
    """Records of voters not yet seen renewed (an operator that just started, a pod that just came):
    alive or the last words of a dead member, it cannot tell yet, so it decides nothing on them."""
    voters = _voter_ids(view)
    return [b for b in view.heartbeats if _candidate(view, b, voters) and not b.confirmed]


def _leader(view: QuorumView) -> HeartbeatRecord | None:
    return next((b for b in view.heartbeats if b.fresh(view.now) and b.confirmed and b.role == contract.ROLE_LEADER
                 and b.healthy), None)


def sees_leader(view: QuorumView) -> list[HeartbeatRecord]:
    """Voters whose own Status names a leader (Status.leader != 0 makes the role leader or follower), on
    a heartbeat seen renewed: Raft has a leader, whoever's Lease went stale."""
    voters = _voter_ids(view)
    return [b for b in view.heartbeats if _candidate(view, b, voters) and b.confirmed and b.voting]


def _voter_count(view: QuorumView) -> int:
    if view.raft is not None:
        return sum(1 for m in view.raft.members if m.voter)
    return len(view.kept)


def _healthy_voters(view: QuorumView) -> int:
    return sum(1 for b in view.heartbeats if b.fresh(view.now) and b.confirmed and b.healthy and b.voting)


def _listing(found: Sequence[Survivor]) -> str:
    return "; ".join(s.describe() for s in sorted(found, key=lambda s: s.ordinal))


def _silent_listing(heartbeats: Sequence[HeartbeatRecord]) -> str:
    return "; ".join(f"{b.pod} (member {b.member_id})" for b in sorted(heartbeats, key=lambda b: b.ordinal))


def decide(view: QuorumView) -> QuorumDecision:
    if view.record is not None:
        return _restoring_quorum(view, view.record)
    if view.raft is None:
        # No leader ever published a membership: a cluster still forming has lost nothing (it
        # used to be told 'no member answers ... restore a backup' while its pods were created).
        return _refuse_request(view, Condition(CONDITION, False, "Forming",
            "no Raft membership published yet: the cluster is forming"))
    leader = _leader(view)
    seeing = sees_leader(view)
    voters = _voter_count(view)
    found = survivors(view)
    if leader is not None or seeing or len(found) >= quorum(voters) or voters == 0:
        healthy = Condition(CONDITION, False, "QuorumHealthy", f"leader {leader.pod}" if leader else (
            f"{seeing[0].pod} (member {seeing[0].member_id}) sees a leader at term {seeing[0].raft_term}"
            if seeing else f"{len(found)} of {voters} voting members answer"))
        if view.request:
            return QuorumDecision(healthy, drop_request=True, events=(Event("Warning", "RecoveryRefused",
                f"recover-quorum={view.request} refused: the cluster has quorum ({healthy.message}); "
                "nothing was changed"),))
        # The last recovery's end stays told until the quorum changes again: the round right after
        # the one that finished it (woken by the record's removal) would otherwise replace it at once.
        if view.previous is not None and view.previous.reason == "Recovered":
            return QuorumDecision(view.previous)
        return QuorumDecision(healthy)
    if unseen(view):
        # No verdict on records not seen renewed: the status says what it said, a request waits.
        return QuorumDecision(view.previous or Condition(CONDITION, False, "QuorumHealthy",
                                                         "waiting to see the members' heartbeats renewed"))

    lost = f"{len(found)} of {voters} voting members answer, {quorum(voters)} needed"
    quiet = silent(view)
    if not found and not quiet:
        # Every voter's Lease stale: the sidecars cannot write to the API, or the pods are down. Either
        # way no Raft evidence, so no verdict: Unknown stops the grace of Automatic and any request.
        return _refuse_request(view, Condition(CONDITION, None, "MembersUnseen",
            f"no heartbeat of the {voters} voting members is fresh: the operator cannot tell whether Raft has "
            "quorum. Stale Leases say the sidecars cannot write to the API (or their pods are down), not that "
            "quorum is lost; nothing is recovered on them. Check the pods and their sidecars' logs; members "
            "that come back with their data rejoin by themselves (lights-out)"))
    listing = _listing(found) if found else "none answers Status"
    if not view.force_supported:
        return _refuse_request(view, Condition(CONDITION, True, "RecoveryUnsupported",
            f"{lost}. Survivors: {listing}. This engine cannot restart one member alone from its "
            "data: restore a backup"))
    command = (f"kubectl annotate {view.kind_short} {view.cluster} {contract.ANNOTATION_RECOVER_QUORUM}")
    if quiet:
        waiting = Condition(CONDITION, True, "SurvivorsNotAnswering",
            f"{lost}. Survivors: {listing}. Not answering Status (their sidecars run, their stores do not): "
            f"{_silent_listing(quiet)}. The most up-to-date survivor cannot be told until they answer, so "
            f"auto{' and the Automatic policy' if view.policy == 'Automatic' else ''} wait for them; to recover "
            f"without them, name a survivor: {command}=<pod>")
    else:
        waiting = Condition(CONDITION, True, "QuorumLost", f"{lost}. Survivors: {listing}. " + (
            f"Recover with: {command}=auto (or =<pod>)" if view.policy != "Automatic" else
            f"Recovery starts automatically {view.grace_seconds} s after the loss was seen"))

    chosen: Survivor | None = None
    requested = view.request
    if requested == contract.RECOVER_QUORUM_AUTO:
        chosen = None if quiet else choose(found)
    elif requested:
        chosen = next((s for s in found if s.pod == requested), None)
        if chosen is None and not any(b.pod == requested for b in quiet):
            return QuorumDecision(waiting, drop_request=True, events=(Event("Warning", "RecoveryRefused",
                f"recover-quorum={requested} refused: not a reachable survivor. Survivors: {listing}"),))
    elif view.policy == "Automatic" and not quiet and view.lost_since is not None \
            and view.now - view.lost_since >= timedelta(seconds=view.grace_seconds):
        chosen, requested = choose(found), "Automatic"
    if chosen is None:
        return QuorumDecision(waiting)  # a request that waits for a silent survivor stays
    record = QuorumLossRecord(id=view.new_id, survivor=chosen.pod, member_id=chosen.member_id,
                            started=rfc3339(view.now), requested=requested or "", term=chosen.term)
    reason = (f"the most up-to-date survivor of: {_listing(found)}" if requested in (contract.RECOVER_QUORUM_AUTO,
              "Automatic") else "the survivor asked for")
    return QuorumDecision(
        Condition(CONDITION, True, "Recovering", f"recovery {record.id}: {chosen.pod} restarts alone from its data"),
        start=record, drop_request=bool(view.request), announce=started_event(record, reason))


def started_event(record: QuorumLossRecord, reason: str) -> Event:
    """The one Event that says a recovery started (posted by whichever operator gets to it first)."""
    return Event("Warning", "QuorumRecoveryStarted",
            f"recovery {record.id} ({record.requested}): {record.survivor} (member {record.member_id}) restarts as "
            f"a one-member cluster, {reason}; the other members' data is moved aside, kept, and they rejoin as "
            "learners one at a time")


def _refuse_request(view: QuorumView, condition: Condition) -> QuorumDecision:
    if not view.request:
        return QuorumDecision(condition)
    return QuorumDecision(condition, drop_request=True, events=(Event("Warning", "RecoveryRefused",
        f"recover-quorum={view.request} refused: {condition.message}"),))


def taken_by(request: str, record: QuorumLossRecord) -> bool:
    """The request asks for what the running recovery does: typically its own request, still on the
    object because the operator that took it stopped before removing it. Removed without a word."""
    if request == contract.RECOVER_QUORUM_AUTO:
        return record.requested in (contract.RECOVER_QUORUM_AUTO, "Automatic")
    return request == record.survivor


def _restoring_quorum(view: QuorumView, record: QuorumLossRecord) -> QuorumDecision:
    """Quorum is being restored: report how far, end the quorum loss once every member votes again."""
    drop = bool(view.request)
    events: tuple[Event, ...] = ()
    if view.request and not taken_by(view.request, record):
        events = (Event("Warning", "RecoveryRefused", f"recover-quorum={view.request} refused: recovery {record.id} "
                                                 f"from {record.survivor} is still running; one recovery at a time"),)
    announce = None if view.announced else started_event(record, "as recorded on the workload")
    leader = _leader(view)
    if leader is None:
        held = view.previous if view.previous is not None and narrated(view.previous, record) else None
        if held is not None and unseen(view):
            return QuorumDecision(held, drop_request=drop, events=events, announce=announce)
        return QuorumDecision(Condition(CONDITION, True, "Recovering",
            f"recovery {record.id}: {record.survivor} restarts alone from its data"), drop_request=drop,
            events=events, announce=announce)
    healthy = _healthy_voters(view)
    voters = _voter_count(view)
    if healthy >= view.replicas and voters >= view.replicas:
        # The survivor took writes and every member rejoined between two reconciles: the status never
        # showed Rejoining, so writes accepted again are told here, before the end.
        if view.previous is not None and view.previous.status is not False:
            events += (Event("Normal", "QuorumRestored", f"recovery {record.id}: {leader.pod} leads and accepts writes "
                                                     f"(the others rejoined before the operator looked)"),)
        return QuorumDecision(Condition(CONDITION, False, "Recovered",
            f"recovery {record.id} from {record.survivor} done: {healthy} members voting"),
            finish=True, drop_request=drop, announce=announce, events=events + (Event("Normal", "QuorumRecovered",
                f"recovery {record.id}: every member votes again ({healthy} of {view.replicas})"
                + _since(record, view.now)),))
    return QuorumDecision(Condition(CONDITION, False, "Rejoining",
        f"recovery {record.id}: {leader.pod} leads and accepts writes; {healthy} of {view.replicas} members voting, "
        "the others rejoin as learners one at a time"), drop_request=drop, events=events, announce=announce)


def with_record(view: QuorumView, record: QuorumLossRecord | None) -> QuorumView:
    """`view` with `record` on the workload, announced when the status already tells that recovery: the
    round's own record, or the one a start found on the workload read at that moment."""
    return replace(view, record=record, announced=record is not None and view.previous is not None
                   and narrated(view.previous, record))


def narrated(condition: Condition, record: QuorumLossRecord) -> bool:
    """The status already reports this recovery, so its start Event was posted (it is posted first)."""
    return condition.reason in ("Recovering", "Rejoining", "Recovered") and f"recovery {record.id}" in condition.message


def previous_condition(old: Mapping[str, Any]) -> Condition | None:
    """The QuorumLost condition a status shows, or None."""
    cond = next((c for c in old.get("conditions") or [] if c.get("type") == CONDITION), None)
    if not cond or cond.get("status") not in _STATUSES:
        return None
    return Condition(CONDITION, _STATUSES[cond["status"]], str(cond.get("reason") or ""),
                     str(cond.get("message") or ""))



def _since(record: QuorumLossRecord, now: datetime) -> str:
    started = parse_rfc3339(record.started)
    return f", {(now - started).total_seconds():.0f} s after it started" if started else ""


def lost_since(previous: Mapping[str, Any]) -> datetime | None:
    """When the previous status's QuorumLost condition turned True, while its reason is QuorumLost or
    SurvivorsNotAnswering (the grace of an Automatic recovery counts from there); None while it is
    not so, or unreadable."""
    cond = next((c for c in previous.get("conditions") or [] if c.get("type") == CONDITION), {})
    if cond.get("status") != "True" or cond.get("reason") not in ("QuorumLost", "SurvivorsNotAnswering"):
        return None
    return parse_rfc3339(cond.get("lastTransitionTime"))


def announcements(old: Mapping[str, Any], new: Condition) -> list[Event]:
    """The QuorumLost condition's changes worth one Event each: the loss itself, and writes accepted again."""
    before = next((c for c in old.get("conditions") or [] if c.get("type") == CONDITION), {})
    if _STATUSES.get(before.get("status") or "") == new.status and before.get("reason") == new.reason:
        return []
    if new.status is not False and new.reason in ("QuorumLost", "SurvivorsNotAnswering", "MembersUnseen",
                                                  "RecoveryUnsupported"):
        return [Event("Warning", new.reason, new.message)]
    if new.reason == "Rejoining" and before.get("status") == "True":
        return [Event("Normal", "QuorumRestored", new.message)]
    return []


def restart(pods: Sequence[Mapping[str, Any]], record: QuorumLossRecord) -> list[Incarnation]:
    """Pods created no later than the recovery started: their sidecars may have joined without the record.

    Whole seconds: a pod created in the second the record was written is restarted once more,
    which is harmless (the record decides again); never one too few. A record whose start is
    unreadable (edited by hand) restarts nothing: every pod would otherwise look older, every time.
    """
    started = parse_rfc3339(record.started)
    if started is None:
        return []
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        created = parse_rfc3339(meta.get("creationTimestamp"))
        if meta.get("deletionTimestamp") or created is None or not meta.get("uid"):
            continue
        if created.replace(microsecond=0) <= started.replace(microsecond=0):
            out.append(Incarnation(str(meta.get("name")), str(meta["uid"])))
    return sorted(out)
