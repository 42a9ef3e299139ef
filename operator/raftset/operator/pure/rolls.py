"""Rolling a changed pod template: one member at a time, followers first, the leader last.

The workload's update strategy is OnDelete on both backends, so no controller restarts a
member on its own; the operator deletes one outdated pod per step and the workload
controller re-creates it on the new template with its volume (its member). Before each
deletion, every kept ordinal must show, in what is read at that moment: a pod that runs,
is Ready (the kubelet's probe passed, so the client Service sends it traffic again: a roll
never takes a second member out of the Service) and is not terminating, and a fresh, healthy voter (one Raft lists as a voter, where the
leader published the membership) whose heartbeat the operator saw renewed at least
`settle` after it first listed that pod. Both times are the operator's own clock
(`PodSighting`, `raftset.operator.pure.freshness`), so a deleted pod whose Lease is still
fresh, or a restarted one that has not reported yet, is never counted, and no record's
staleness or another loop's timing is needed to see it. The leader goes last, and its
sidecar hands leadership away on the preStop path before its store stops: one leader
change per roll, the leader's own.

Pure: from the workload's status, the pods, the operator's sightings of them, the
heartbeat records and the published Raft membership.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from raftset.membership import RaftMembership
from raftset.operator.pure.heartbeats import HeartbeatRecord
from raftset.operator.pure.objects import Incarnation
from raftset.operator.pure.planner import (Plan, awaiting_renewal, leader, leader_going, membership,
                                           undisputed_leader)
from raftset.times import rfc3339

REVISION_LABEL = "controller-revision-hash"
STUCK_REASON = "RollStuck"  # Degraded: a roll that waits with no pod restarted for the stuck period


@dataclass(frozen=True)
class PodRevision:
    """What a roll needs to know of one member pod."""

    name: str
    ordinal: int
    revision: str
    uid: str  # tells a re-created pod from the one it replaced
    running: bool  # status.phase Running
    terminating: bool
    ready: bool  # the Ready condition is True: the kubelet's probe passed, the Service routes to it


@dataclass(frozen=True)
class PodSighting:
    """When the operator first listed one incarnation (UID) of a member pod, on its own clock."""

    uid: str
    seen: datetime


def sight(previous: Mapping[str, PodSighting], pods: Sequence[PodRevision], now: datetime) -> dict[str, PodSighting]:
    """The sightings after listing `pods` at `now`: a pod keeps its first sighting while its UID
    stays; a re-created pod (a new UID) is seen anew. Pods no longer listed are forgotten."""
    out = {}
    for pod in pods:
        before = previous.get(pod.name)
        out[pod.name] = before if before is not None and before.uid == pod.uid else PodSighting(pod.uid, now)
    return out


def update_revision(workload: Mapping[str, Any]) -> str | None:
    """The template revision every pod should run, once the workload controller has seen the last spec."""
    meta, status = workload.get("metadata") or {}, workload.get("status") or {}
    if status.get("observedGeneration") != meta.get("generation"):
        return None  # the controller has not computed the revision of our last write yet
    return status.get("updateRevision") or None


def pending(workload: Mapping[str, Any]) -> bool:
    """Does the workload's status say some pods run an older template? (Cheap: no pod list.)"""
    status = workload.get("status") or {}
    revision = update_revision(workload)
    return revision is not None and int(status.get("updatedReplicas") or 0) < int(status.get("replicas") or 0)


def pod_revisions(pods: Sequence[Mapping[str, Any]], cluster: str) -> list[PodRevision]:
    """The cluster's member pods (`<cluster>-<ordinal>`) as PodRevisions; strays are ignored."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = meta.get("name", "")
        prefix, _, tail = name.rpartition("-")
        uid = meta.get("uid")
        if prefix != cluster or not tail.isdigit() or not uid:
            continue
        status = pod.get("status") or {}
        out.append(PodRevision(name=name, ordinal=int(tail), revision=(meta.get("labels") or {}).get(REVISION_LABEL, ""),
                               uid=str(uid), running=status.get("phase") == "Running",
                               terminating=bool(meta.get("deletionTimestamp")),
                               ready=any(c.get("type") == "Ready" and c.get("status") == "True"
                                         for c in status.get("conditions") or [])))
    return sorted(out, key=lambda p: p.ordinal)


def next_restart(plan: Plan, revision: str, pods: Sequence[PodRevision], heartbeats: Sequence[HeartbeatRecord],
                 now: datetime, *, seen: Mapping[str, PodSighting], settle: timedelta = timedelta(0),
                 hand_off: bool = True, raft: RaftMembership | None = None) -> Plan:
    """The steady `plan` turned into the roll's next move: restart one pod, wait, or nothing to do.

    `seen` is `sight` of `pods`. `settle` (the sidecars' heartbeat interval) is how long after
    the operator first listed a pod a renewal of its heartbeat must be observed: one refresh
    as a healthy voter from that pod, time for a restarted member to catch up with the log it
    missed. `hand_off` is the engine's Capabilities.hand_off: whether the leader's sidecar
    moves leadership away before it restarts. `raft` is the leader's published membership:
    where it is known, a member whose Lease says "voter" but whom Raft does not list as one
    holds the roll, as it holds a scale step.
    """
    kept = plan.kept
    outdated = [p for p in pods if p.ordinal in kept and p.revision != revision]
    if not outdated:
        return plan
    left = f"{len(outdated)} of {len(kept)} members on an older template"

    def wait(why: str) -> Plan:
        return dataclasses.replace(plan, action="wait", message=f"rolling ({left}): {why}")

    restarting = [p.name for p in pods if p.terminating]
    if restarting:
        return wait(f"waiting for {', '.join(restarting)} to restart")
    # An outdated member whose pod serves nothing (not Running and Ready) goes first, while every
    # other member serves: restarting it takes no one out of the client Service, and where the new
    # template is what it needs (a bad template rolled back) this is the only way it comes back.
    down = [p for p in outdated if not (p.running and p.ready)]
    broken = max(down, key=lambda p: p.ordinal) if down else None
    others = [o for o in kept if broken is None or o != broken.ordinal]
    records = [m for m in heartbeats if broken is None or m.ordinal != broken.ordinal]
    running = {p.ordinal: p for p in pods if p.ordinal in others and p.running}
    absent = [o for o in others if o not in running]
    if absent:
        return wait(f"waiting for the pod of ordinal {', '.join(map(str, absent))} to be created and run")
    unready = [p.name for p in running.values() if not p.ready]
    if unready:
        return wait(f"waiting for {', '.join(unready)} to be Ready (its readiness probe), so that the client "
                    "Service has it back before another member leaves it")
    state = membership(others, records, now, raft)
    if not state.settled:
        return wait(state.describe())
    by_pod = {m.pod: m for m in records}
    unproven = sorted(p.name for p in running.values() if not _reported_from(p, by_pod.get(p.name),
                                                                              seen.get(p.name), settle))
    if unproven:
        return wait(f"waiting for {', '.join(unproven)} to report healthy from its pod, a renewal seen "
                    f"{settle.seconds} s or more after the operator first listed that pod")
    unobserved = awaiting_renewal(records, now)
    if unobserved is not None:
        return wait(unobserved)
    current_leader = undisputed_leader(heartbeats, raft, now)
    if current_leader is None:
        return wait("waiting for a leader" + ("" if leader(heartbeats, now) is None else
                                              " (the one a heartbeat names was deposed: a newer Raft term says so)"))
    # Followers first, the highest ordinal first (as a StatefulSet would); the leader last.
    victim = broken or max(outdated, key=lambda p: (p.name != current_leader.pod, p.ordinal))
    leading = victim.name == current_leader.pod
    message = f"restarting {victim.name} on the new template ({left})"
    if victim is broken:
        message += f"; it serves nothing on the old one ({'not Ready' if victim.running else 'not running'})"
    if leading:
        message += f"; {leader_going(hand_off)}"
    return dataclasses.replace(plan, action="roll", message=message, restart=(Incarnation(victim.name, victim.uid),),
                               hand_off_from=victim.name if leading else None, hand_off=hand_off)


def overdue(move: Plan, seen: Mapping[str, PodSighting], now: datetime, stuck_after: float) -> Plan:
    """`move` marked stuck (Degraded) when it waits and no pod of the cluster is younger, to the
    operator, than `stuck_after`: the roll has restarted nothing for that long. Its words stay the
    same round after round (a change of the condition's message is an Event)."""
    if move.action != "wait" or not seen:
        return move
    since = max(s.seen for s in seen.values())
    if (now - since).total_seconds() < stuck_after:
        return move
    return dataclasses.replace(move, stuck=STUCK_REASON, message=(
        f"{move.message}; no pod restarted for {stuck_after:.0f} s (the newest listed at {rfc3339(since)})"))


def _reported_from(pod: PodRevision, record: HeartbeatRecord | None, sighting: PodSighting | None,
                   settle: timedelta) -> bool:
    """Did the operator see `pod`'s heartbeat renewed `settle` after it first listed this pod?

    Both times are the operator's. The pod a re-created one replaces was gone before it was
    created, so a renewal seen after the listing is the new pod's; `settle` also covers a
    watch event of the old pod's last write that arrives late."""
    return (record is not None and record.confirmed and sighting is not None and sighting.uid == pod.uid
            and record.observed > sighting.seen + settle)
