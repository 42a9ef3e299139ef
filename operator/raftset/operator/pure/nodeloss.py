"""A member lost with its node: when to ask for its removal, and when to re-create its pod elsewhere.

The protocol is raftset.nodeloss: the operator marks the pod once the node has not been Ready for
the grace period, the leader's sidecar removes the member only if it does not answer and a quorum
stays, and records that on the pod; then the operator deletes the pod and its claim, and the
workload controller re-creates the pod on another node as a new member. This module decides, over
the pods, nodes and volumes read at that moment; raftset.operator.components.node_loss reads and
writes.

Only a member whose data lives on its node alone is replaced: a local PersistentVolume or an
emptyDir. A claim that can follow the pod to another node (network storage) is only reported:
deleting a pod that a partitioned node may still run could put two members on one volume.

A Node object deleted with its node (a cloud node removed) leaves no node to read: Kubernetes'
pod garbage collector deletes its pods, the workload makes them anew, and one whose local volume
is pinned to that node waits unscheduled. Such a pod is read on the node its volume names, lost
since the scheduler refused it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from raftset import contract, nodeloss, replace
from raftset.membership import RaftMembership
from raftset.operator.pure.events import Event
from raftset.times import parse_rfc3339, rfc3339

Problem = tuple[str, str]
HOSTNAME_LABEL = "kubernetes.io/hostname"
AUTOMATIC = "Automatic"
# How long a node must have been not Ready before it is reported at all (at most half the grace).
QUIET = timedelta(seconds=60)


@dataclass(frozen=True)
class Suspect:
    """A member pod that is not Ready, or carries the mark or the removal, as read this round."""

    pod: str
    uid: str
    ordinal: int
    node: str
    unready_since: datetime | None  # the pod's Ready condition's last turn, while not Ready
    mark: nodeloss.Mark | None
    removal: nodeloss.Removal | None
    replace_requested: bool
    claim: str | None  # its data claim; None for an emptyDir
    node_bound: bool  # its data lives on that node alone (a local volume, or an emptyDir)


@dataclass(frozen=True)
class NodeState:
    name: str
    ready: bool
    since: datetime | None  # when its Ready condition last turned


@dataclass(frozen=True)
class NodeLossDecision:
    mark: tuple[tuple[str, nodeloss.Mark], ...] = ()  # (pod, mark) to write
    unmark: tuple[str, ...] = ()  # pods whose node came back before their member was removed
    recreate: tuple[Suspect, ...] = ()  # removed members' pods: deleted with their claims
    problem: Problem | None = None
    events: tuple[Event, ...] = ()
    due: datetime | None = None  # re-check then: a grace period ends


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def node_state(node: Mapping[str, Any]) -> NodeState:
    ready = _condition(node, "Ready")
    return NodeState(str((node.get("metadata") or {}).get("name", "")), ready.get("status") == "True",
                     parse_rfc3339(ready.get("lastTransitionTime")))


def bound_to_one_node(volume: Mapping[str, Any] | None) -> bool:
    """A PersistentVolume whose data only one node reaches: local or hostPath, or a required node
    affinity to a single host name. A volume pinned to a zone can follow its pod within the zone."""
    spec = (volume or {}).get("spec") or {}
    if spec.get("local") or spec.get("hostPath"):
        return True
    terms = ((spec.get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms") or []
    return bool(terms) and all(
        any(e.get("key") == HOSTNAME_LABEL and e.get("operator") == "In" and len(e.get("values") or []) == 1
            for e in term.get("matchExpressions") or [])
        for term in terms)


def pinned_node(volume: Mapping[str, Any] | None) -> str | None:
    """The one node a PersistentVolume's required node affinity names (a local volume's), else None."""
    terms = ((((volume or {}).get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}).get(
        "nodeSelectorTerms") or []
    if len(terms) != 1:
        return None
    hosts = [e.get("values") or [] for e in terms[0].get("matchExpressions") or []
             if e.get("key") == HOSTNAME_LABEL and e.get("operator") == "In"]
    return hosts[0][0] if len(hosts) == 1 and len(hosts[0]) == 1 else None


def refused_by_scheduler(pod: Mapping[str, Any]) -> bool:
    """Placed on no node because the scheduler found none it fits (a volume pinned to a gone node)."""
    scheduled = _condition(pod, "PodScheduled")
    return scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable"


def suspect(pod: Mapping[str, Any], cluster: str, *, claim: str | None, node_bound: bool,
            pinned: str | None = None) -> Suspect | None:
    """The pod as this module reads it; None for a pod on no node (unless the scheduler refused it
    and its volume is `pinned` to one), or not one of `cluster`'s members."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    ordinal = contract.member_ordinal(cluster, str(meta.get("name", "")))
    node = spec.get("nodeName") or (pinned if refused_by_scheduler(pod) else None)
    if not node or ordinal is None:
        return None
    annotations = meta.get("annotations") or {}
    ready = _condition(pod, "Ready") if spec.get("nodeName") else _condition(pod, "PodScheduled")
    return Suspect(
        pod=meta["name"], uid=str(meta.get("uid", "")), ordinal=ordinal, node=node,
        unready_since=None if ready.get("status") == "True" else parse_rfc3339(ready.get("lastTransitionTime")),
        mark=nodeloss.parse_mark(annotations.get(contract.ANNOTATION_NODE_LOST)),
        removal=nodeloss.parse_removal(annotations.get(contract.ANNOTATION_NODE_LOST_REMOVAL)),
        replace_requested=replace.requested(annotations), claim=claim, node_bound=node_bound)


def _answering(raft: RaftMembership | None, ordinal: int) -> bool:
    """Does the leader's last record say the member answered its Status call?"""
    member = raft.by_ordinal(ordinal) if raft is not None else None
    return member is not None and member.raft_index is not None


def _replacing(lost_since: str, pod: str) -> Problem:
    return ("NodeLostReplacing", f"{lost_since}: the leader's sidecar removes its member once it has not answered "
                                 f"for a while and a quorum stays; then {pod} is re-created on another node")


def decide(suspects: Sequence[Suspect], nodes: Mapping[str, NodeState], raft: RaftMembership | None, *,
           policy: str, grace_seconds: int, now: datetime) -> NodeLossDecision:
    """What to do about members whose nodes are not Ready. One member at a time: no second mark while
    a marked member is still in Raft."""
    grace = timedelta(seconds=grace_seconds)
    marks: list[tuple[str, nodeloss.Mark]] = []
    unmark: list[str] = []
    recreate: list[Suspect] = []
    problems: list[Problem] = []
    events: list[Event] = []
    dues: list[datetime] = []
    busy = any(s.mark is not None and s.removal is None for s in suspects)
    for s in sorted(suspects, key=lambda s: s.ordinal):
        node = nodes.get(s.node)
        where = f"{s.pod}'s node {s.node}"
        if s.removal is not None:
            recreate.append(s)
            events.append(Event("Normal", "NodeLostRecreating", (
                f"member {s.removal.member} of {s.pod} was removed by {s.removal.by}'s sidecar ({s.removal.reason}); "
                f"deleting {s.pod}" + (f" and its claim {s.claim}" if s.claim else "")
                + " so that it comes back on another node as a new member")))
            continue
        if node is not None and node.ready:
            if s.mark is not None:
                unmark.append(s.pod)
                events.append(Event("Normal", "NodeLostReturned",
                                    f"{where} is Ready again and its member was not removed: nothing is replaced"))
            continue
        since = (node.since if node is not None else None) or s.unready_since
        if since is None:
            continue  # not Ready, but no node says why: the member's own troubles (repair) handle it
        quiet_until = since + min(QUIET, grace / 2)
        if now < quiet_until and s.mark is None and not s.replace_requested:
            dues.append(quiet_until)  # a node's blip (a kubelet restart, a slow heartbeat) tells nothing
            continue
        lost_since = (f"{where} has not been Ready since {rfc3339(since)}" if node is not None else
                      f"{where}, which holds its data, is one the API no longer lists (its Node object was deleted); "
                      f"{s.pod} has not been Ready since {rfc3339(since)}")
        if not s.node_bound:
            problems.append(("NodeLost", (
                f"{lost_since}; its claim can follow it to another node, but deleting a pod that the node may "
                f"still run could put two members on one volume: once the node is known to be down, "
                f"`kubectl delete pod {s.pod} --force` moves it")))
            continue
        if s.mark is not None:
            if _answering(raft, s.ordinal):
                problems.append(("NodeLostServing", (
                    f"{lost_since}, but its member still answers the leader: nothing is removed while it does "
                    f"(the node may only be cut off from the API server)")))
            else:
                problems.append(_replacing(lost_since, s.pod))
            continue
        if policy != AUTOMATIC and not s.replace_requested:
            problems.append(("NodeLost", (
                f"{lost_since}; spec.recovery.nodeLoss is Manual: `kubectl annotate pod {s.pod} "
                f"{contract.ANNOTATION_REPLACE}=true` replaces its member on another node")))
            continue
        due = now if policy != AUTOMATIC else since + grace
        if now < due:
            dues.append(due)
            problems.append(("NodeLost", (
                f"{lost_since}; its data lives on that node alone: its member is replaced on another node at "
                f"{rfc3339(due)} unless the node comes back (spec.recovery.nodeLossGracePeriodSeconds "
                f"{grace_seconds})")))
            continue
        if busy:
            problems.append(("NodeLost", f"{lost_since}; it is replaced after the member being replaced now"))
            continue
        busy = True
        marks.append((s.pod, nodeloss.Mark(s.node, rfc3339(since), rfc3339(now))))
        events.append(Event("Warning", "NodeLostReplacing", (
            f"{lost_since}, past the grace period, and its data lives on that node alone: asked the leader's "
            f"sidecar to remove its member if it does not answer, then {s.pod} is re-created on another node")))
        problems.append(_replacing(lost_since, s.pod))  # the same words the next rounds say: one Warning
    return NodeLossDecision(tuple(marks), tuple(unmark), tuple(recreate), problems[0] if problems else None,
                    tuple(events), min(dues, default=None))
