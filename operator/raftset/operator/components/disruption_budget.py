"""The PodDisruptionBudget: voluntary evictions never take the cluster below quorum.

A scale-in step's victim stops counting as available before the step is taken: the budget's
selector leaves its pod out by name (the `statefulset.kubernetes.io/pod-name` label both workload
controllers set when they create a pod, so the disruption controller's cache never lags it). The
change is a new generation of the budget, and the Eviction API refuses every eviction it covers
until the disruption controller has observed that generation: no eviction is let through on the
count that still held the victim. An eviction that passed just before the change is caught by the
step's guard (`ScaleInGuard`), which reads the pods and the budget's `disruptedPods` after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from raftset import contract
from raftset.contract import quorum
from raftset.operator.components.protocol import Applied, Manifest, Owned, Round
from raftset.operator.io.api import KubeAPI
from raftset.operator.pure import planner
from raftset.operator.pure.objects import metadata
from raftset.operator.pure.scale_step import SCALE_IN
from raftset.operator.pure.spec import Cluster
from raftset.workloads import POD_NAME_LABEL


def pod_disruption_budget(cluster: Cluster, current_voters: int, leaving: Iterable[str] = ()) -> dict[str, Any] | None:
    """Voluntary evictions may never take the cluster below quorum, of the desired size or of
    the membership as it is now, whichever is larger: in the middle of a 5 -> 3 scale-in Raft
    still counts 5 voters, and 3 of them must stay. The pods `leaving` (the scale-in step's
    victim) are not counted: only the members that stay can make up that quorum."""
    if not cluster.pdb_enabled:
        return None
    min_available = cluster.pdb_min_available
    if min_available is None:
        min_available = quorum(max(cluster.replicas, current_voters))
    selector: dict[str, Any] = {"matchLabels": contract.selector_labels(cluster.name)}
    if leaving := sorted(set(leaving)):
        selector["matchExpressions"] = [{"key": POD_NAME_LABEL, "operator": "NotIn", "values": leaving}]
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(cluster, cluster.name, "member"),
        "spec": {"minAvailable": min_available, "selector": selector},
    }


def leaving_pods(plan: planner.Plan) -> tuple[str, ...]:
    """The pods a scale-in takes away: this round's victim, or the victim of the step Raft has yet to confirm."""
    pods = set(plan.scale_away)
    if plan.record is not None and plan.record.action == SCALE_IN:
        pods.add(plan.record.pod)
    return tuple(sorted(pods))


def disrupted_pods(budget: Mapping[str, Any] | None) -> dict[str, str]:
    """The pods the Eviction API let go and the disruption controller has not yet seen deleted, and when."""
    status = (budget or {}).get("status") or {}
    return {str(pod): str(at) for pod, at in (status.get("disruptedPods") or {}).items()}


def current_voters(current: Round) -> int:
    """How many voters the cluster has now: Raft's count, or the pods the workload runs if that is more."""
    raft_voters = sum(m.voter for m in current.raft.members) if current.raft is not None else 0
    return max(len(current.plan.kept), raft_voters)


class DisruptionBudget(Applied):
    name = "disruption-budget"

    def render(self, current: Round) -> list[Manifest]:
        pdb = pod_disruption_budget(current.cluster, current_voters(current), leaving_pods(current.plan))
        return [pdb] if pdb is not None else []


class ScaleInGuard(Owned):
    """The scale-in step's quorum guard once more, on evidence read after the budget left the victim out.

    The plan's guard read the pods before the budget changed: an eviction let through in between (by
    the budget's count that still held the victim) is in the pod list read now, or in the budget's
    `disruptedPods` while its pod is not yet deleted. The budget is read first: an entry leaves it only
    once the disruption controller saw the pod deleted, which the pod list read after it then shows.
    A failed read stops the round before the workload is written (registry.walk)."""

    name = "scale-in-guard"

    async def sync(self, kube: KubeAPI, current: Round) -> Round:
        if current.plan.action != SCALE_IN or current.workload is None:
            return current
        cluster = current.cluster
        budget = await kube.get("policy/v1", "PodDisruptionBudget", cluster.namespace, cluster.name) \
            if cluster.pdb_enabled else None
        pods = await kube.list("v1", "Pod", cluster.namespace, contract.label_selector(cluster.name))
        serving = planner.serving_ordinals(pods, cluster.name, disrupted=disrupted_pods(budget))
        again = planner.plan(cluster.name, cluster.backend, cluster.replicas, cluster.backend.scale(current.workload),
                             current.heartbeats, current.raft, current.now,
                             hand_off=cluster.engine.capabilities.hand_off, serving=serving)
        return current if again == current.plan else dataclasses.replace(current, plan=again)
