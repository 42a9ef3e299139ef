"""The operator against a bare kube-apiserver: no workload controllers, no OpenKruise.

What must hold without controllers: the owned objects are applied with owner references
and labels, status and printer columns come from the heartbeat Leases, and a cluster
asking for Advanced StatefulSet where OpenKruise is absent is Degraded, not crashed.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
import yaml
from kubernetes import client

from raftset import contract
from raftset.sidecar.heartbeat import Heartbeat, lease_body, rfc3339
from tests.harness.operator import Operator, api, kubectl, wait_for

pytestmark = pytest.mark.k8s

def create(kubeconfig: str, kind: str, name: str, namespace: str, **spec: Any) -> None:
    body = {"apiVersion": contract.API_VERSION, "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 3, "tls": {"provider": "disabled"}, **spec}}
    kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(body))


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind), {})


def test_owned_objects_are_applied_with_owner_and_labels(kube_apiserver: Any, bare_operator: Operator,
                                                          namespace: str) -> None:
    create(kube_apiserver.kubeconfig, "EtcdCluster", "plain", namespace, workloadKind="StatefulSet")
    apps = client.AppsV1Api(api(kube_apiserver.kubeconfig))
    sts = wait_for(lambda: apps.read_namespaced_stateful_set("plain", namespace), 30, "the StatefulSet")
    assert sts.spec.replicas == 3
    assert sts.metadata.owner_references[0].kind == "EtcdCluster"
    assert sts.metadata.labels[contract.LABEL_MANAGED_BY] == "raftset"
    init = sts.spec.template.spec.init_containers[0]
    assert init.name == "sidecar" and init.restart_policy == "Always"
    core = client.CoreV1Api(api(kube_apiserver.kubeconfig))
    peer = core.read_namespaced_service("plain-peer", namespace)
    assert peer.spec.cluster_ip == "None" and peer.spec.publish_not_ready_addresses
    pdb = client.PolicyV1Api(api(kube_apiserver.kubeconfig)).read_namespaced_pod_disruption_budget("plain", namespace)
    assert pdb.spec.min_available == 2


def test_status_and_printer_columns_follow_the_heartbeats(kube_apiserver: Any, bare_operator: Operator,
                                                          namespace: str) -> None:
    create(kube_apiserver.kubeconfig, "XlineCluster", "beats", namespace, workloadKind="StatefulSet")
    leases = client.CoordinationV1Api(api(kube_apiserver.kubeconfig))
    for ordinal in range(3):
        pod = contract.pod_name("beats", ordinal)
        beat = Heartbeat(member_id=f"{ordinal + 10:x}", name=pod, healthy=True,
                         role=contract.ROLE_LEADER if ordinal == 1 else contract.ROLE_FOLLOWER,
                         raft_term=3, raft_index=7, time=rfc3339(datetime.now(timezone.utc)), cluster_id="c")
        leases.create_namespaced_lease(namespace, lease_body(pod, namespace, "beats", beat, duration=600, owner=None))
    custom = client.CustomObjectsApi(api(kube_apiserver.kubeconfig))

    def with_members() -> dict[str, Any] | None:
        obj = custom.get_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "xlineclusters", "beats")
        return obj if len((obj.get("status") or {}).get("members", [])) == 3 else None

    obj = wait_for(with_members, 30, "three members in status")
    assert obj["status"]["leader"] == "beats-1"
    assert condition(obj, "Available")["status"] == "True"
    assert {m["id"] for m in obj["status"]["members"]} == {"a", "b", "c"}
    table = kubectl(kube_apiserver.kubeconfig, "get", "xc", "beats", "-n", namespace).stdout
    header, row = table.splitlines()[:2]
    assert "LEADER" in header and "WORKLOAD" in header
    assert "beats-1" in row and "StatefulSet" in row


def test_advanced_statefulset_without_openkruise_is_degraded(kube_apiserver: Any, bare_operator: Operator,
                                                            namespace: str) -> None:
    create(kube_apiserver.kubeconfig, "EtcdCluster", "nokruise", namespace, workloadKind="AdvancedStatefulSet")
    custom = client.CustomObjectsApi(api(kube_apiserver.kubeconfig))

    def degraded() -> dict[str, Any] | None:
        obj = custom.get_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters", "nokruise")
        return obj if condition(obj, "Degraded").get("status") == "True" else None

    obj = wait_for(degraded, 30, "Degraded condition")
    cond = condition(obj, "Degraded")
    assert cond["reason"] == "WorkloadAPIMissing" and "OpenKruise" in cond["message"]
    core = client.CoreV1Api(api(kube_apiserver.kubeconfig))
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=nokruise").items
    assert any(e.reason == "WorkloadAPIMissing" and e.type == "Warning" for e in events)
    assert bare_operator.alive(), "a bad cluster must not crash the operator"
