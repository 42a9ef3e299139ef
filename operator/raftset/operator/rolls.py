"""Rolling a changed pod template: one member at a time, followers first, the leader last.

The workload's update strategy is OnDelete on both backends, so no controller restarts a
member on its own; the operator deletes one outdated pod per step and the workload
controller re-creates it on the new template with its volume (its member). A step waits
until every member of the kept ordinals is a fresh, healthy voter (one Raft lists as a
voter, where the leader published the membership) whose heartbeat was renewed by the pod
that runs now, so a member that has not come back yet is never counted
twice. The leader goes last, and its sidecar hands leadership away on the preStop path
before its store stops: one leader change per roll, the leader's own.

Pure: from the workload's status, the pods' revision labels, the heartbeat records and
the published Raft membership.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from raftset.membership import RaftMembership
from raftset.operator.heartbeats import HeartbeatRecord
from raftset.operator.planner import Plan, awaiting_renewal, leader, leader_going, membership
from raftset.times import parse_rfc3339

REVISION_LABEL = "controller-revision-hash"


@dataclass(frozen=True)
class PodRevision:
    """What a roll needs to know of one member pod."""

    name: str
    ordinal: int
    revision: str
    created: datetime
    terminating: bool


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
        created = parse_rfc3339(meta.get("creationTimestamp"))
        if prefix != cluster or not tail.isdigit() or created is None:
            continue
        out.append(PodRevision(name=name, ordinal=int(tail), revision=(meta.get("labels") or {}).get(REVISION_LABEL, ""),
                               created=created,
                               terminating=bool(meta.get("deletionTimestamp"))))
    return sorted(out, key=lambda p: p.ordinal)


def next_step(plan: Plan, revision: str, pods: Sequence[PodRevision], members: Sequence[HeartbeatRecord],
              now: datetime, settle: timedelta = timedelta(0), hand_off: bool = True,
              raft: RaftMembership | None = None) -> Plan:
    """The steady `plan` turned into the next roll step: restart one pod, wait, or nothing to do.

    `settle` (the sidecars' heartbeat interval) is how long a member must have reported
    from its new pod before the next one goes: one refresh as a healthy voter, time for a
    restarted member to catch up with the log it missed. `hand_off` is the engine's
    Capabilities.hand_off: whether the leader's sidecar moves leadership away before it restarts.
    `raft` is the leader's published membership: where it is known, a member whose Lease says
    "voter" but whom Raft does not list as one holds the roll, as it holds a scale step.
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
    state = membership(kept, members, now, raft)
    if not state.settled:
        return wait(state.describe())
    by_pod = {m.pod: m for m in members}
    running = {p.name: p for p in pods if p.ordinal in kept}
    stale = sorted(name for name, pod in running.items()
                   if name not in by_pod or by_pod[name].renewed < pod.created + settle)
    if stale:
        return wait(f"waiting for {', '.join(stale)} to report healthy from its new pod for {settle.seconds} s")
    unobserved = awaiting_renewal(members, now)
    if unobserved is not None:
        return wait(unobserved)
    current_leader = leader(members, now)
    if current_leader is None:
        return wait("waiting for a leader")
    # Followers first, the highest ordinal first (as a StatefulSet would); the leader last.
    victim = max(outdated, key=lambda p: (p.name != current_leader.pod, p.ordinal))
    leading = victim.name == current_leader.pod
    message = f"restarting {victim.name} on the new template ({left})"
    if leading:
        message += f"; {leader_going(hand_off)}"
    return dataclasses.replace(plan, action="roll", message=message, restart=(victim.name,),
                               hand_off_from=victim.name if leading else None, hand_off=hand_off)

