"""Quorum loss as the operator sees it: the pure decision (issue 12, item 2).

Inputs are what the API says now: the Raft membership the last leader published (who votes),
the heartbeat Leases (who still answers, with its committed and applied index: a member serves
Maintenance.Status without quorum), the user's request annotation, spec.recovery, and the
recovery record on the workload. Nothing is kept in memory, so an operator restarted midway
decides the same step again. The record names the survivor; the sidecars do the rest
(raftset.sidecar.recovery), and this module only reports, starts, restarts the pods that
started before the record, and ends the recovery once every member votes again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from raftset import contract
from raftset.contract import quorum
from raftset.membership import RaftMembership
from raftset.operator.heartbeats import HeartbeatRecord
from raftset.operator.status import Condition
from raftset.quorumloss import RecoveryRecord, Survivor, choose
from raftset.times import parse_rfc3339, rfc3339

CONDITION = "QuorumLost"


@dataclass(frozen=True)
class QuorumView:
    cluster: str
    kind_short: str  # etcdc | xc: for the command the condition suggests
    replicas: int
    kept: Sequence[int]  # ordinals the workload runs
    raft: RaftMembership | None
    beats: Sequence[HeartbeatRecord]
    request: str | None  # the raftset.dev/recover-quorum annotation
    policy: str  # Manual | Automatic
    grace_seconds: int
    lost_since: datetime | None  # when QuorumLost last turned True, if it is True
    record: RecoveryRecord | None
    force_supported: bool
    now: datetime
    new_id: str = ""  # the id a recovery started now gets (the shell makes it up)


@dataclass(frozen=True)
class QuorumDecision:
    condition: Condition
    start: RecoveryRecord | None = None  # write this record on the workload, then restart the pods
    finish: bool = False  # every member votes again: remove the record
    drop_request: bool = False  # the request was taken or refused: remove the annotation
    events: tuple[tuple[str, str, str], ...] = field(default_factory=tuple)  # (type, reason, message)


def survivors(view: QuorumView) -> list[Survivor]:
    """Voting members that still answer Status: a fresh heartbeat that carries a raft term."""
    voters = {m.id for m in view.raft.members if m.voter} if view.raft is not None else None
    out = []
    for beat in view.beats:
        if not beat.fresh(view.now) or beat.raft_term == 0 or not beat.member_id:
            continue
        if beat.role == contract.ROLE_LEARNER or (voters is not None and beat.member_id not in voters):
            continue
        out.append(Survivor(pod=beat.pod, ordinal=beat.ordinal, member_id=beat.member_id,
                            committed=beat.raft_index, term=beat.raft_term, applied=beat.applied_index))
    return out


def _leader(view: QuorumView) -> HeartbeatRecord | None:
    return next((b for b in view.beats if b.fresh(view.now) and b.role == contract.ROLE_LEADER and b.healthy), None)


def _voter_count(view: QuorumView) -> int:
    if view.raft is not None:
        return sum(1 for m in view.raft.members if m.voter)
    return len(view.kept)


def _healthy_voters(view: QuorumView) -> int:
    return sum(1 for b in view.beats if b.fresh(view.now) and b.healthy and b.voting)


def _listing(found: Sequence[Survivor]) -> str:
    return "; ".join(s.describe() for s in sorted(found, key=lambda s: s.ordinal))


def decide(view: QuorumView) -> QuorumDecision:
    if view.record is not None:
        return _recovering(view, view.record)
    leader = _leader(view)
    voters = _voter_count(view)
    found = survivors(view)
    if leader is not None or len(found) >= quorum(voters) or voters == 0:
        healthy = Condition(CONDITION, False, "QuorumHealthy",
                            f"leader {leader.pod}" if leader else f"{len(found)} of {voters} voting members answer")
        if view.request:
            return QuorumDecision(healthy, drop_request=True, events=(("Warning", "RecoveryRefused",
                f"recover-quorum={view.request} refused: the cluster has quorum ({healthy.message}); "
                "nothing was changed"),))
        return QuorumDecision(healthy)

    lost = f"{len(found)} of {voters} voting members answer, {quorum(voters)} needed"
    if not found:
        return _refuse_request(view, Condition(CONDITION, True, "NoSurvivor",
            f"{lost}: no member answers. Members that come back with their data rejoin by themselves "
            "(lights-out); if every volume is gone for good, restore a backup into a new cluster"))
    if not view.force_supported:
        return _refuse_request(view, Condition(CONDITION, True, "RecoveryUnsupported",
            f"{lost}. Survivors: {_listing(found)}. This engine cannot restart one member alone from its "
            "data: restore a backup"))
    waiting = Condition(CONDITION, True, "QuorumLost", f"{lost}. Survivors: {_listing(found)}. " + (
        f"Recover with: kubectl annotate {view.kind_short} {view.cluster} "
        f"{contract.ANNOTATION_RECOVER_QUORUM}=auto (or =<pod>)" if view.policy != "Automatic" else
        f"Recovery starts automatically {view.grace_seconds} s after the loss was seen"))

    chosen: Survivor | None = None
    requested = view.request
    if requested == contract.RECOVER_QUORUM_AUTO:
        chosen = choose(found)
    elif requested:
        chosen = next((s for s in found if s.pod == requested), None)
        if chosen is None:
            return QuorumDecision(waiting, drop_request=True, events=(("Warning", "RecoveryRefused",
                f"recover-quorum={requested} refused: not a reachable survivor. Survivors: {_listing(found)}"),))
    elif view.policy == "Automatic" and view.lost_since is not None \
            and view.now - view.lost_since >= timedelta(seconds=view.grace_seconds):
        chosen, requested = choose(found), "Automatic"
    if chosen is None:
        return QuorumDecision(waiting)
    record = RecoveryRecord(id=view.new_id, survivor=chosen.pod, member_id=chosen.member_id,
                            started=rfc3339(view.now), requested=requested or "")
    reason = (f"the most up-to-date survivor of: {_listing(found)}" if requested in (contract.RECOVER_QUORUM_AUTO,
              "Automatic") else "the survivor asked for")
    return QuorumDecision(
        Condition(CONDITION, True, "Recovering", f"recovery {record.id}: {chosen.pod} restarts alone from its data"),
        start=record, drop_request=bool(view.request), events=(("Warning", "QuorumRecoveryStarted",
            f"recovery {record.id} ({requested}): {chosen.pod} restarts as a one-member cluster, {reason}; "
            "the other members' data is moved aside, kept, and they rejoin as learners one at a time"),))


def _refuse_request(view: QuorumView, condition: Condition) -> QuorumDecision:
    if not view.request:
        return QuorumDecision(condition)
    return QuorumDecision(condition, drop_request=True, events=(("Warning", "RecoveryRefused",
        f"recover-quorum={view.request} refused: {condition.message}"),))


def _recovering(view: QuorumView, record: RecoveryRecord) -> QuorumDecision:
    """A recovery is under way: report its step, end it once every member votes again."""
    drop = bool(view.request)
    events: tuple[tuple[str, str, str], ...] = ()
    if drop:
        events = (("Warning", "RecoveryRefused", f"recover-quorum={view.request} refused: recovery {record.id} "
                                                 "is still running; one recovery at a time"),)
    leader = _leader(view)
    if leader is None:
        return QuorumDecision(Condition(CONDITION, True, "Recovering",
            f"recovery {record.id}: {record.survivor} restarts alone from its data"), drop_request=drop, events=events)
    healthy = _healthy_voters(view)
    voters = _voter_count(view)
    if healthy >= view.replicas and voters >= view.replicas:
        return QuorumDecision(Condition(CONDITION, False, "Recovered",
            f"recovery {record.id} from {record.survivor} done: {healthy} members voting"),
            finish=True, drop_request=drop, events=events + (("Normal", "QuorumRecovered",
                f"recovery {record.id}: every member votes again ({healthy} of {view.replicas})"
                + _since(record, view.now)),))
    return QuorumDecision(Condition(CONDITION, False, "Rejoining",
        f"recovery {record.id}: {leader.pod} leads and accepts writes; {healthy} of {view.replicas} members voting, "
        "the others rejoin as learners one at a time"), drop_request=drop, events=events)


def _since(record: RecoveryRecord, now: datetime) -> str:
    started = parse_rfc3339(record.started)
    return f", {(now - started).total_seconds():.0f} s after it started" if started else ""


def lost_since(previous: Mapping[str, Any]) -> datetime | None:
    """When the previous status's QuorumLost condition turned True with reason QuorumLost (the
    grace of an Automatic recovery counts from there); None while it is not so, or unreadable."""
    cond = next((c for c in previous.get("conditions") or [] if c.get("type") == CONDITION), {})
    if cond.get("status") != "True" or cond.get("reason") != "QuorumLost":
        return None
    return parse_rfc3339(cond.get("lastTransitionTime"))


def announcements(old: Mapping[str, Any], new: Condition) -> list[tuple[str, str, str]]:
    """The QuorumLost condition's changes worth one Event each: the loss itself, and writes accepted again."""
    before = next((c for c in old.get("conditions") or [] if c.get("type") == CONDITION), {})
    if (before.get("status") == "True") == new.status and before.get("reason") == new.reason:
        return []
    if new.status and new.reason in ("QuorumLost", "NoSurvivor", "RecoveryUnsupported"):
        return [("Warning", new.reason, new.message)]
    if new.reason == "Rejoining" and before.get("status") == "True":
        return [("Normal", "QuorumRestored", new.message)]
    return []


def restart(pods: Sequence[Mapping[str, Any]], record: RecoveryRecord) -> list[str]:
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
        if meta.get("deletionTimestamp") or created is None:
            continue
        if created.replace(microsecond=0) <= started.replace(microsecond=0):
            out.append(str(meta.get("name")))
    return sorted(out)
