"""The PodDisruptionBudget: voluntary evictions never take the cluster below quorum."""

from __future__ import annotations

from typing import Any

from raftset import contract
from raftset.contract import quorum
from raftset.operator.components.protocol import Applied, Manifest, Round
from raftset.operator.pure.objects import metadata
from raftset.operator.pure.spec import Cluster


def pod_disruption_budget(cluster: Cluster, current_voters: int) -> dict[str, Any] | None:
    """Voluntary evictions may never take the cluster below quorum, of the desired size or of
    the membership as it is now, whichever is larger: in the middle of a 5 -> 3 scale-in Raft
    still counts 5 voters, and 3 of them must stay."""
    if not cluster.pdb_enabled:
        return None
    min_available = cluster.pdb_min_available
    if min_available is None:
        min_available = quorum(max(cluster.replicas, current_voters))
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(cluster, cluster.name, "member"),
        "spec": {
            "minAvailable": min_available,
            "selector": {"matchLabels": contract.selector_labels(cluster.name)},
        },
    }



def current_voters(current: Round) -> int:
    """How many voters the cluster has now: Raft's count, or the pods the workload runs if that is more."""
    raft_voters = sum(m.voter for m in current.raft.members) if current.raft is not None else 0
    return max(len(current.plan.kept), raft_voters)


class DisruptionBudget(Applied):
    name = "disruption-budget"

    def render(self, current: Round) -> list[Manifest]:
        pdb = pod_disruption_budget(current.cluster, current_voters(current))
        return [pdb] if pdb is not None else []
