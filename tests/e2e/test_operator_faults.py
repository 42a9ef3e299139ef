"""Operator faults of issue 11 on the real control plane (kube-controller-manager, OpenKruise, kwok).

g: a deleted and re-created Advanced StatefulSet keeps the ordinals that still have
members, holes included. And issue 14: a member claim that stays Pending for want of its
StorageClass is named in status and an Event.

Pods are kwok pods; `Sidecars` writes the heartbeat Leases and the leader's membership Lease.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.harness.operator import Operator, Sidecars, kubectl, wait_for
from tests.harness.view import STEP_TIMEOUT, ClusterView

pytestmark = pytest.mark.e2e


def test_a_recreated_advanced_statefulset_keeps_its_holes(control_plane: Any, operator: Operator,
                                                          namespace: str) -> None:
    """Before the fix the operator re-created it at 2 replicas with no reservations: pods kv-0
    and kv-1, a new member in the hole and kv-2's member without a pod."""
    c = ClusterView(control_plane.kubeconfig, "EtcdCluster", "holes", namespace, "AdvancedStatefulSet")
    c.create(3)
    with Sidecars(c.api, namespace, c.name, leader=2) as sidecars:
        c.wait_pods(0, 1, 2)
        c.wait_settled(3)
        c.scale(2)  # the leader is kept: ordinal 1, the highest follower, goes
        c.wait_pods(0, 2)
        c.wait_settled(2)
        assert c.workload()["spec"]["reserveOrdinals"] == [1]
        old_uid = c.workload()["metadata"]["uid"]

        # Deleting the workload stops the pods; it does not take their members out of Raft.
        sidecars.refusing = {0, 2}
        kubectl(control_plane.kubeconfig, "delete", "statefulsets.apps.kruise.io", c.name, "-n", namespace,
                "--wait=false")

        def recreated() -> dict[str, Any] | None:
            workload = c.workload()  # 404 until it is re-created: wait_for retries
            return workload if workload["metadata"]["uid"] != old_uid else None

        workload = wait_for(recreated, STEP_TIMEOUT, "the operator to re-create the workload")
        assert (workload["spec"]["replicas"], workload["spec"].get("reserveOrdinals")) == (2, [1])
        c.wait_pods(0, 2)
        obj = c.wait_settled(2)
        assert obj["status"]["reservedOrdinals"] == [1]
        assert {m["name"] for m in obj["status"]["members"]} == c.pod_names(0, 2)
        assert any(reason == "Creating" and "holding 1 empty" in message for reason, message in c.events())


def test_a_missing_storage_class_is_named_in_status_and_an_event(control_plane: Any, operator: Operator,
                                                                  namespace: str) -> None:
    """Issue 14: a cluster whose claims stay Pending said only NoLeader / 'waiting for ordinal 0
    to join'. The StatefulSet controller makes the claim and the PV controller refuses it."""
    c = ClusterView(control_plane.kubeconfig, "EtcdCluster", "noclass", namespace, "StatefulSet")
    c.create(1, storage={"storageClassName": "does-not-exist"})  # replaces the harness's ephemeral storage
    core = client.CoreV1Api(c.api)

    def degraded() -> dict[str, Any] | None:
        cond = c.condition("Degraded")
        return cond if cond.get("reason") == "StorageClassMissing" else None

    cond = wait_for(degraded, STEP_TIMEOUT, "Degraded=StorageClassMissing")
    assert "'does-not-exist'" in cond["message"] and "data-noclass-0" in cond["message"]
    assert core.read_namespaced_persistent_volume_claim("data-noclass-0", namespace).status.phase == "Pending"
    assert any(reason == "StorageClassMissing" for reason, _ in c.events())
