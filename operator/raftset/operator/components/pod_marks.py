"""The scale-away mark on the pods the plan takes away: informational for humans and the sidecar;
the workload object is what decides."""

from __future__ import annotations

from collections.abc import Iterable

from raftset import contract
from raftset.operator.components.protocol import Owned, Round
from raftset.operator.io.api import KubeAPI
from raftset.operator.pure import planner


def pod_marks(cluster: str, plan: planner.Plan, marked_pods: Iterable[str]) -> dict[str, str | None]:
    """The scale-away annotation per pod: set on the plan's victims, removed where the plan changed its mind."""
    marks: dict[str, str | None] = {pod: None for pod in planner.stale_marks(cluster, plan, marked_pods)}
    marks.update({pod: "true" for pod in plan.scale_away})
    return marks


class PodMarks(Owned):
    name = "pod-marks"

    async def sync(self, kube: KubeAPI, current: Round) -> Round:
        for pod, value in pod_marks(current.cluster.name, current.plan, current.marked_pods).items():
            await kube.merge_patch("v1", "Pod", current.cluster.namespace, pod, {
                "metadata": {"annotations": {contract.ANNOTATION_SCALE_AWAY: value}}})
        return current
