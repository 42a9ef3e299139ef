"""Operator faults of issue 11 on the real control plane (kube-controller-manager, OpenKruise, kwok).

g: a deleted and re-created Advanced StatefulSet keeps the ordinals that still have
members, holes included. And issue 14: a member claim that stays Pending for want of its
StorageClass is named in status and an Event.

The re-created workload runs real sidecars and real etcd (`PodRunner`): what outlives the
workload depends on the owners the sidecars give their Leases.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.test_fullstack import FAST, stack
from tests.harness.checker import Writer, check
from tests.harness.operator import Operator, kubectl, wait_for
from tests.harness.view import STEP_TIMEOUT, ClusterView
from tools.devcluster.podrunner import PodRunner

pytestmark = pytest.mark.e2e


def test_a_recreated_advanced_statefulset_keeps_its_holes(control_plane: Any, operator: Operator, namespace: str,
                                                          runner: PodRunner) -> None:
    """Real sidecars and real etcd: the Leases carry the owners the sidecars give them.

    Issue 30, bug 6: the membership Lease was owned by the workload, so deleting the workload
    garbage-collected it with the heartbeat Leases, and the operator re-created the workload at
    full size (3 replicas, no reservations): a new member in the hole. Owned by the cluster
    object, the record outlives the workload."""
    kv = stack(control_plane.kubeconfig, namespace, "holes", runner)
    kv.create(3, workloadKind="AdvancedStatefulSet", storage={"size": "1Gi"}, **FAST)  # claims: pods keep their data
    kv.wait_healthy(0, 1, 2)
    kv.move_leader(2, 0, 1, 2)  # the planner keeps the leader: ordinal 1, the highest follower, goes
    kv.scale(2)
    kv.wait_healthy(0, 2)
    assert kv.workload()["spec"]["reserveOrdinals"] == [1]
    ids = {m.name: m.id for m in kv.members(0, 2)}
    assert sorted(ids) == ["holes-0", "holes-2"]
    old_uid = kv.workload()["metadata"]["uid"]

    writer = Writer([kv.url(o) for o in (0, 2)])
    writer.start()
    try:
        # Deleting the workload stops the pods; their sidecars keep their members in Raft.
        kubectl(control_plane.kubeconfig, "delete", "statefulsets.apps.kruise.io", kv.name, "-n", namespace,
                "--wait=false")

        def recreated() -> dict[str, Any] | None:
            workload = kv.workload()  # 404 until it is re-created: wait_for retries
            return workload if workload["metadata"]["uid"] != old_uid else None

        workload = wait_for(recreated, STEP_TIMEOUT, "the operator to re-create the workload")
        assert (workload["spec"]["replicas"], workload["spec"].get("reserveOrdinals")) == (2, [1])
        st = kv.wait_healthy(0, 2)
    finally:
        writer.stop()
    assert st["reservedOrdinals"] == [1]
    assert {m["name"] for m in st["members"]} == kv.pod_names(0, 2)
    assert {m.name: m.id for m in kv.members(0, 2)} == ids, "the members came back with their IDs"
    assert kv.pods() == kv.pod_names(0, 2)
    assert any(reason == "Creating" and "holding 1 empty" in message for reason, message in kv.events())
    assert writer.ok > 0, "the writer wrote nothing"
    asyncio.run(check([kv.url(o) for o in (0, 2)], writer.acked))


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
