"""The heartbeat and membership Leases: written by the sidecars, not owned by the cluster, so the
operator deletes what is left when the cluster object goes."""

from __future__ import annotations

from raftset import contract
from raftset.operator.components.protocol import Round
from raftset.operator.io.api import KubeAPI


class HeartbeatLeases:
    name = "leases"
    after_failure = False

    async def sync(self, kube: KubeAPI, current: Round) -> Round:
        return current

    async def release(self, kube: KubeAPI, namespace: str, cluster: str) -> None:
        for label in (contract.LABEL_HEARTBEAT, contract.LABEL_MEMBERSHIP):
            selector = f"{contract.LABEL_INSTANCE}={cluster},{label}=true"
            for lease in await kube.list("coordination.k8s.io/v1", "Lease", namespace, selector):
                await kube.delete("coordination.k8s.io/v1", "Lease", namespace, lease["metadata"]["name"])
