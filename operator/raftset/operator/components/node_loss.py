"""A member lost with its node (raftset.nodeloss): the pods, nodes and volumes read at this moment,
raftset.operator.pure.nodeloss's decision written. Reads nothing while every placed member pod is
Ready and none is in a node loss (the pod book says so)."""

from __future__ import annotations

import dataclasses
from typing import Any

from kubernetes.client.exceptions import ApiException

from raftset import contract
from raftset.operator.components.protocol import Owned, Round
from raftset.operator.io.api import KubeAPI
from raftset.operator.io.kube import api_error_message
from raftset.operator.pure import nodeloss
from raftset.operator.pure.diagnosis import claim_name


async def _suspect(kube: KubeAPI, current: Round, name: str) -> nodeloss.Suspect | None:
    cluster = current.cluster
    pod = await kube.get("v1", "Pod", cluster.namespace, name)
    if pod is None:
        return None
    ordinal = contract.member_ordinal(cluster.name, name)
    if cluster.storage.ephemeral or ordinal is None:
        return nodeloss.suspect(pod, cluster.name, claim=None, node_bound=True)
    claim_of = claim_name(cluster.name, ordinal)
    claim = await kube.get("v1", "PersistentVolumeClaim", cluster.namespace, claim_of)
    volume_name = ((claim or {}).get("spec") or {}).get("volumeName")
    volume = await kube.get("v1", "PersistentVolume", "", volume_name) if volume_name else None
    return nodeloss.suspect(pod, cluster.name, claim=claim_of if claim else None,
                            node_bound=nodeloss.bound_to_one_node(volume), pinned=nodeloss.pinned_node(volume))


class NodeLoss(Owned):
    name = "node-loss"
    after_failure = True  # it reads and writes only the lost members' pods and claims

    async def sync(self, kube: KubeAPI, current: Round) -> Round:
        if not current.unready_pods:
            return current
        cluster = current.cluster
        try:
            suspects = [s for name in sorted(current.unready_pods) if (s := await _suspect(kube, current, name))]
            nodes: dict[str, nodeloss.NodeState] = {}
            for node_name in sorted({s.node for s in suspects}):
                node: dict[str, Any] | None = await kube.get("v1", "Node", "", node_name)
                if node is not None:
                    nodes[node_name] = nodeloss.node_state(node)
        except ApiException as error:
            # Blind, not broken: the rest of the round goes on (an install whose ClusterRole predates
            # node-loss handling may not read nodes or volumes).
            return current.found(("NodeStateUnreadable", (
                f"cannot read the nodes and volumes of unready members ({api_error_message(error)}): a member "
                f"lost with its node is not replaced until the operator may (docs/security.md)")))
        decision = nodeloss.decide(suspects, nodes, current.raft, policy=cluster.recovery.node_loss,
                                   grace_seconds=cluster.recovery.node_loss_grace_seconds, now=current.now)
        for pod, mark in decision.mark:
            await kube.merge_patch("v1", "Pod", cluster.namespace, pod,
                                   {"metadata": {"annotations": {contract.ANNOTATION_NODE_LOST: mark.to_json()}}})
        for pod in decision.unmark:
            await kube.merge_patch("v1", "Pod", cluster.namespace, pod,
                                   {"metadata": {"annotations": {contract.ANNOTATION_NODE_LOST: None}}})
        for lost in decision.recreate:
            # Its member is out of Raft. The claim first (held by its protection until the pod is gone), so
            # that the re-created pod cannot find it again; then the pod, at once: its kubelet will never
            # confirm. The workload controller makes both anew, the claim on the new pod's node.
            if lost.claim:
                await kube.delete("v1", "PersistentVolumeClaim", cluster.namespace, lost.claim)
            await kube.delete("v1", "Pod", cluster.namespace, lost.pod, uid=lost.uid, grace_seconds=0)
        return dataclasses.replace(current.found(decision.problem).told(*decision.events), due=decision.due)
