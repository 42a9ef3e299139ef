"""A roll's restart: delete the pod the plan chose; the workload controller re-creates it on the new
template (raftset.operator.pure.rolls chooses it)."""

from __future__ import annotations

from raftset.operator.components.protocol import Owned, Round
from raftset.operator.io.api import KubeAPI


class PodRestarts(Owned):
    name = "pod-restarts"

    async def sync(self, kube: KubeAPI, current: Round) -> Round:
        if current.write:
            for pod in current.plan.restart:
                await kube.delete("v1", "Pod", current.cluster.namespace, pod.name, uid=pod.uid)
        return current
