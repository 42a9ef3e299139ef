"""A member whose node's object was deleted with the node (a cloud node removed), as the operator sees it
on a bare apiserver: the pod garbage collector's and the StatefulSet's work is written here as they write
it, and the leader's sidecar's removal record too (its side is tests/unit/test_sidecar_shells_clean.py)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from kubernetes import client

from raftset import contract, nodeloss
from raftset.times import rfc3339
from raftset.workloads import POD_NAME_LABEL
from tests.harness.operator import Operator, api, heartbeat_lease, member_id, membership_lease, wait_for
from tests.harness.objects import apply_lease, condition, create

pytestmark = pytest.mark.k8s

GONE = "node-gone"  # the node the lost member's local volume is pinned to: no Node object names it
GRACE_S = 30  # spec.recovery.nodeLossGracePeriodSeconds, its minimum


def test_a_member_whose_node_object_was_deleted_is_marked_and_then_re_created_with_its_claim(
        kube_apiserver: Any, bare_operator: Operator, namespace: str) -> None:
    kubeconfig = kube_apiserver.kubeconfig
    core, custom = client.CoreV1Api(api(kubeconfig)), client.CustomObjectsApi(api(kubeconfig))
    leases = client.CoordinationV1Api(api(kubeconfig))
    name = "gone"
    create(kubeconfig, "EtcdCluster", name, namespace, workloadKind="StatefulSet", storage={"size": "1Gi"},
           recovery={"nodeLossGracePeriodSeconds": GRACE_S})
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})
    refused_at = datetime.now(timezone.utc) - timedelta(seconds=GRACE_S + 5)  # unscheduled past the grace
    for ordinal in range(3):
        pod = contract.pod_name(name, ordinal)
        claim = f"data-{pod}"
        volume = f"{namespace}-{claim}"
        core.create_persistent_volume({
            "metadata": {"name": volume},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "local": {"path": "/mnt/x"},
                     "persistentVolumeReclaimPolicy": "Delete", "claimRef": {"namespace": namespace, "name": claim},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In",
                          "values": [GONE if ordinal == 2 else f"node{ordinal}"]}]}]}}}})
        core.create_namespaced_persistent_volume_claim(namespace, {
            "metadata": {"name": claim, "labels": contract.selector_labels(name)},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                     "volumeName": volume}})
        labels = {**contract.selector_labels(name), POD_NAME_LABEL: pod}
        spec: dict[str, Any] = {"containers": [{"name": "etcd", "image": "etcd"}]}
        if ordinal < 2:
            spec["nodeName"] = f"node{ordinal}"
        core.create_namespaced_pod(namespace, {"metadata": {"name": pod, "labels": labels}, "spec": spec})
        status = ({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]} if ordinal < 2 else
                  {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                       "reason": "Unschedulable", "lastTransitionTime": rfc3339(refused_at),
                                                       "message": "1 node(s) had volume node affinity conflict"}]})
        core.patch_namespaced_pod_status(pod, namespace, {"status": status})
    for ordinal in range(2):
        apply_lease(leases, namespace, heartbeat_lease(
            namespace, name, contract.pod_name(name, ordinal), member_id=member_id(ordinal),
            role=contract.ROLE_LEADER if ordinal == 0 else contract.ROLE_FOLLOWER, lease_seconds=600))
    apply_lease(leases, namespace, membership_lease(namespace, name, 0, {o: False for o in range(3)}, index=100,
                                                    lease_seconds=600, silent={2}))

    victim = contract.pod_name(name, 2)

    def marked() -> nodeloss.Mark | None:
        annotations = core.read_namespaced_pod(victim, namespace).metadata.annotations or {}
        return nodeloss.parse_mark(annotations.get(contract.ANNOTATION_NODE_LOST))

    mark = wait_for(marked, 60, f"the node-lost mark on {victim}")
    assert mark.node == GONE and mark.since == rfc3339(refused_at), mark

    def degraded() -> dict[str, Any] | None:  # the round's status is written after its mark
        found = condition(custom.get_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace,
                                                              "etcdclusters", name), "Degraded")
        return found if found.get("reason") == "NodeLostReplacing" else None

    told = wait_for(degraded, 60, "Degraded=NodeLostReplacing")
    assert "no longer lists" in told["message"], told
    wait_for(lambda: "NodeLostReplacing" in [e.reason for e in core.list_namespaced_event(namespace).items], 60,
             "the NodeLostReplacing Event")
    assert core.read_namespaced_persistent_volume_claim(f"data-{victim}", namespace).metadata.deletion_timestamp is None

    # The leader's sidecar removed the member (it did not answer) and recorded it on the pod.
    removal = nodeloss.Removal(member_id(2), contract.pod_name(name, 0), rfc3339(datetime.now(timezone.utc)),
                               "on a node the operator found lost, silent for 20s")
    core.patch_namespaced_pod(victim, namespace, {"metadata": {"annotations": {
        contract.ANNOTATION_NODE_LOST_REMOVAL: removal.to_json()}}})

    def claim_going() -> bool:
        try:
            found = core.read_namespaced_persistent_volume_claim(f"data-{victim}", namespace)
        except client.ApiException as error:
            return error.status == 404
        return found.metadata.deletion_timestamp is not None  # held by its protection finalizer: no controller here

    wait_for(claim_going, 60, f"data-{victim} deleted")
    wait_for(lambda: not core.list_namespaced_pod(namespace, field_selector=f"metadata.name={victim}").items, 60,
             f"{victim} deleted, for the StatefulSet to make it anew")
    wait_for(lambda: "NodeLostRecreating" in [e.reason for e in core.list_namespaced_event(namespace).items], 60,
             "the NodeLostRecreating Event")
    for kept in (0, 1):
        assert core.read_namespaced_persistent_volume_claim(f"data-{contract.pod_name(name, kept)}",
                                                            namespace).metadata.deletion_timestamp is None
    print(json.dumps({"mark": mark.to_json(), "degraded": told["message"]}))
