"""Every object the operator owns for a cluster, as one component with one protocol.

A reconcile walks COMPONENTS in order (etcd-druid's `internal/component` registry is the
model): TLS material and claims first, because pods must find their Secrets and sizes;
then the pod marks, the member RBAC, the Services, the PodDisruptionBudget, the workload
and, on a roll step, the one pod that restarts. Each component renders from plain data (pure, unit-tested) and writes through the
thin `KubeClient` shell; whether a reconcile writes at all is decided once, by `pacing.write_due`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from raftset import contract
from raftset.membership import RaftMembership
from raftset.operator.components import tls
from raftset.operator.components import claims
from raftset.operator.io.api import KubeAPI
from raftset.operator.pure import manifests
from raftset.operator.pure import planner
from raftset.operator.pure.spec import Cluster
from raftset.operator.pure.storage import Claims

Problem = tuple[str, str]
Manifest = dict[str, Any]


@dataclass(frozen=True)
class Step:
    """What one reconcile knows, and what the components before this one found out."""

    cluster: Cluster
    plan: planner.Plan
    workload: Mapping[str, Any] | None
    marked_pods: tuple[str, ...]
    now: datetime
    write: bool  # False on a quiet tick: components only check, they do not apply
    raft: RaftMembership | None = None  # the membership the leader published, if any
    tls_revision: str | None = None
    claims: Claims | None = None
    problem: Problem | None = None  # the first problem found wins: it is the most upstream

    def found(self, problem: Problem | None, **changes: Any) -> Step:
        return dataclasses.replace(self, problem=self.problem or problem, **changes)


class Component(Protocol):
    name: str

    async def sync(self, kube: KubeAPI, step: Step) -> Step:
        """Make this component's objects match the step; return the step with what was learnt."""

    async def release(self, kube: KubeAPI, namespace: str, cluster: str) -> None:
        """Remove what garbage collection does not (the cluster object is being deleted)."""


class _NothingToRelease:
    """Owned objects carry an ownerReference: garbage collection removes them."""

    async def release(self, kube: KubeAPI, namespace: str, cluster: str) -> None:
        return None


class TLSMaterial(_NothingToRelease):
    name = "tls"

    async def sync(self, kube: KubeAPI, step: Step) -> Step:
        state = await tls.ensure_tls(kube, step.cluster, step.now, workload=step.workload, write=step.write)
        return step.found(state.problem, tls_revision=state.revision)


class VolumeClaims(_NothingToRelease):
    """PVC expansion; the claims' retention follows the workload's policy."""

    name = "claims"

    async def sync(self, kube: KubeAPI, step: Step) -> Step:
        found, problem = await claims.ensure_claims(kube, step.cluster, step.workload, write=step.write)
        return step.found(problem, claims=found)


def pod_marks(cluster: str, plan: planner.Plan, marked_pods: Iterable[str]) -> dict[str, str | None]:
    """The scale-away annotation per pod: set on the plan's victims, removed where the plan changed its mind."""
    marks: dict[str, str | None] = {pod: None for pod in planner.stale_marks(cluster, plan, marked_pods)}
    marks.update({pod: "true" for pod in plan.scale_away})
    return marks


class PodMarks(_NothingToRelease):
    """Informational for humans and the sidecar; the workload object is what decides."""

    name = "pod-marks"

    async def sync(self, kube: KubeAPI, step: Step) -> Step:
        for pod, value in pod_marks(step.cluster.name, step.plan, step.marked_pods).items():
            await kube.merge_patch("v1", "Pod", step.cluster.namespace, pod, {
                "metadata": {"annotations": {contract.ANNOTATION_SCALE_AWAY: value}}})
        return step


@dataclass(frozen=True)
class Applied(_NothingToRelease):
    """Objects applied server-side from a pure renderer, only on a step that writes."""

    name: str
    render: Callable[[Step], list[Manifest]]

    async def sync(self, kube: KubeAPI, step: Step) -> Step:
        if not step.write:
            return step
        for manifest in self.render(step):
            await kube.apply(manifest)
        return step


@dataclass(frozen=True)
class Workload(_NothingToRelease):
    """The StatefulSet or Advanced StatefulSet; what the apply returns is the workload the status reads."""

    name: str = "workload"

    @staticmethod
    def render(step: Step) -> list[Manifest]:
        return [manifests.workload(step.cluster, step.plan.replicas, step.plan.reserved,
                                   tls_revision=step.tls_revision, claims=step.claims,
                                   scale_step=step.plan.record)]

    async def sync(self, kube: KubeAPI, step: Step) -> Step:
        if not step.write:
            return step
        (manifest,) = self.render(step)
        return dataclasses.replace(step, workload=await kube.apply(manifest))


class PodRestarts(_NothingToRelease):
    """A roll step: delete the chosen pod; the workload controller re-creates it on the new template."""

    name = "pod-restarts"

    async def sync(self, kube: KubeAPI, step: Step) -> Step:
        if step.write:
            for pod in step.plan.restart:
                await kube.delete("v1", "Pod", step.cluster.namespace, pod)
        return step


class HeartbeatLeases:
    """The heartbeat and membership Leases: written by the sidecars, not owned by the cluster, so the operator deletes what is left."""

    name = "leases"

    async def sync(self, kube: KubeAPI, step: Step) -> Step:
        return step

    async def release(self, kube: KubeAPI, namespace: str, cluster: str) -> None:
        for label in (contract.LABEL_HEARTBEAT, contract.LABEL_MEMBERSHIP):
            selector = f"{contract.LABEL_INSTANCE}={cluster},{label}=true"
            for lease in await kube.list("coordination.k8s.io/v1", "Lease", namespace, selector):
                await kube.delete("coordination.k8s.io/v1", "Lease", namespace, lease["metadata"]["name"])


def _member_rbac(step: Step) -> list[Manifest]:
    return manifests.member_rbac(step.cluster, step.plan.replicas + len(step.plan.reserved))


def _services(step: Step) -> list[Manifest]:
    return [manifests.peer_service(step.cluster), manifests.client_service(step.cluster),
            manifests.metrics_service(step.cluster)]


def current_voters(step: Step) -> int:
    """How many voters the cluster has now: Raft's count, or the pods the workload runs if that is more."""
    raft_voters = sum(m.voter for m in step.raft.members) if step.raft is not None else 0
    return max(len(step.plan.kept), raft_voters)


def _disruption_budget(step: Step) -> list[Manifest]:
    pdb = manifests.pod_disruption_budget(step.cluster, current_voters(step))
    return [pdb] if pdb is not None else []


COMPONENTS: tuple[Component, ...] = (
    TLSMaterial(),
    VolumeClaims(),
    PodMarks(),
    Applied("member-rbac", _member_rbac),
    Applied("services", _services),
    Applied("disruption-budget", _disruption_budget),
    Workload(),
    PodRestarts(),
    HeartbeatLeases(),
)


def rendered(step: Step) -> list[Manifest]:
    """Everything a writing step applies, in apply order (TLS material aside: it depends on what is stored)."""
    return [manifest for component in COMPONENTS if isinstance(component, (Applied, Workload))
            for manifest in component.render(step)]
