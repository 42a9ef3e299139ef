"""What a component is (one protocol: sync, release) and the round it works on.

A component owns some of a cluster's objects: its module renders them (pure functions over a
`Round`) and syncs them through the `KubeAPI` protocol. The registry lists the components in the
order a reconcile walks them (etcd-druid's `internal/component` is the model).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from raftset.membership import RaftMembership
from raftset.operator.io.api import KubeAPI
from raftset.operator.pure.events import Condition, Event
from raftset.operator.pure import objects
from raftset.operator.pure.heartbeats import HeartbeatRecord
from raftset.operator.pure.planner import Plan
from raftset.operator.pure.spec import Cluster
from raftset.operator.pure.storage import Claims

Problem = tuple[str, str]
Manifest = dict[str, Any]


@dataclass(frozen=True)
class Round:
    """What one reconcile round knows, and what the components before this one found out."""

    cluster: Cluster
    plan: Plan
    workload: Mapping[str, Any] | None
    marked_pods: tuple[str, ...]
    now: datetime
    write: bool  # False on a quiet round: components only check, they do not apply
    raft: RaftMembership | None = None  # the membership the leader published, if any
    body: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the cluster object as read
    heartbeats: Sequence[HeartbeatRecord] = ()
    previous: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the status last computed
    tls_revision: str | None = None
    claims: Claims | None = None
    problem: Problem | None = None  # the first problem found wins: it is the most upstream
    events: tuple[Event, ...] = ()  # to post on the cluster object, in order
    dropped_annotations: tuple[str, ...] = ()  # annotations of the cluster object to remove (requests taken)
    conditions: tuple[Condition, ...] = ()  # status conditions a component decides (QuorumLost)
    late_problem: Problem | None = None  # a failure after the workload was settled: reported last
    unready_pods: tuple[str, ...] = ()  # placed member pods not Ready, or in a node loss (the pod book)
    due: datetime | None = None  # a decision's own re-check time (a grace period ends): the next wake-up
    # What this process applied in the cluster's last writing round, by object (objects.ref, .applied_mark):
    # empty when every object is due (a resync, a drift, a restart); and what this round applied or kept.
    applied: Mapping[str, str] = dataclasses.field(default_factory=dict)
    applying: tuple[tuple[str, str], ...] = ()

    def found(self, problem: Problem | None, **changes: Any) -> Round:
        return dataclasses.replace(self, problem=self.problem or problem, **changes)

    def told(self, *events: Event) -> Round:
        return dataclasses.replace(self, events=self.events + events)

    def dropping(self, annotation: str) -> Round:
        """The cluster object's `annotation` (a request now taken) is removed with the status patch."""
        return dataclasses.replace(self, dropped_annotations=self.dropped_annotations + (annotation,))


class Component(Protocol):
    name: str
    # Runs even when an earlier component's write failed (its work does not depend on theirs).
    after_failure: bool

    async def sync(self, kube: KubeAPI, current: Round) -> Round:
        """Make this component's objects match the current round; return it with what was learnt."""

    async def release(self, kube: KubeAPI, namespace: str, cluster: str) -> None:
        """Remove what garbage collection does not (the cluster object is being deleted)."""


class Owned:
    """Owned objects carry an ownerReference: garbage collection removes them."""

    after_failure = False

    async def release(self, kube: KubeAPI, namespace: str, cluster: str) -> None:
        return None


class Applied(Owned):
    """Objects applied server-side from a pure renderer (`render`), only on a round that writes."""

    name: str

    def render(self, current: Round) -> list[Manifest]:
        raise NotImplementedError

    async def sync(self, kube: KubeAPI, current: Round) -> Round:
        if not current.write:
            return current
        for manifest in self.render(current):
            current, _ = await apply(kube, current, manifest)
        return current


async def apply(kube: KubeAPI, current: Round, manifest: Manifest, live: Mapping[str, Any] | None = None, *,
                read: bool = False) -> tuple[Round, dict[str, Any] | None]:
    """Apply `manifest` unless this process applied the very same one in the cluster's last writing
    round (objects.still_applied); the apiserver's answer, None when skipped. A spec change re-renders
    every component, and re-applying the unchanged ones was most of the operator's work under churn."""
    key = objects.ref(manifest)
    mark = current.applied.get(key)
    if mark is not None and objects.still_applied(mark, manifest, live, read=read):
        return dataclasses.replace(current, applying=current.applying + ((key, mark),)), None
    answer = await kube.apply(manifest)
    applied = objects.applied_mark(manifest, answer)
    return dataclasses.replace(current, applying=current.applying + ((key, applied),)), answer
