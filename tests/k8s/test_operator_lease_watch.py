"""Issue 28: the operator's own watches (Leases, member pods, workloads), against a real kube-apiserver.

kopf no longer watches Leases: every heartbeat, membership and backup record reaches the rounds
through this one watch (raftset.operator.io.objectwatch). A Lease created, renewed, changed and
deleted must reach the book, ringing only where the book says so; a watch request the server
ends must be followed by the next from the last version. (A version too old, 410, cannot be
had on demand from a fresh apiserver: tests/unit/test_objectwatch_events.py reads that event.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from kubernetes import client

from raftset import contract
from raftset.operator.io import kube
from raftset.operator import watches
from raftset.operator.io.objectwatch import ObjectWatch
from raftset.operator.pure.heartbeats import from_observed
from raftset.operator.pure.books import Change
from raftset.operator.pure.leasebook import LeaseBook
from raftset.operator.pure.podbook import PodBook
from raftset.operator.pure.workloadbook import WorkloadBook
from raftset.workloads import ADVANCED_STATEFULSET
from tests.harness.operator import api

pytestmark = pytest.mark.k8s

RENEWED = datetime(2026, 1, 1, 12, 0, 0, 1, tzinfo=timezone.utc)  # a MicroTime the client writes as one


def heartbeat_lease(pod: str, role: str) -> dict[str, Any]:
    beat = {"member_id": "1", "name": pod, "role": role, "healthy": True, "ready": True, "time": "t"}
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": contract.lease_name(pod),
                         "labels": {contract.LABEL_HEARTBEAT: "true", contract.LABEL_INSTANCE: "demo"},
                         "annotations": {contract.ANNOTATION_HEARTBEAT: json.dumps(beat)}},
            "spec": {"holderIdentity": pod, "leaseDurationSeconds": 15, "renewTime": RENEWED}}


async def until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_lease_created_renewed_changed_and_deleted_reaches_the_book_across_watch_requests(
        kube_apiserver: Any, namespace: str, operator_session: kube.KubeClient) -> None:
    leases = client.CoordinationV1Api(api(kube_apiserver.kubeconfig))
    leases.create_namespaced_lease(namespace, heartbeat_lease("demo-0", contract.ROLE_FOLLOWER))  # before the list
    book, changes = LeaseBook(), []
    watch_api = operator_session.watch_client(1)
    watch = ObjectWatch(watch_api, watches.LEASES, contract.LABEL_INSTANCE, book, [namespace], changes.append,
                        watch_seconds=2)
    task = asyncio.create_task(watch.run())
    key = (namespace, "demo")
    try:
        await asyncio.wait_for(watch.listed.wait(), 20)
        assert [(c.key, c.ring) for c in changes] == [(key, True)], "the listed Lease, new: a round"
        await asyncio.sleep(3)  # the first watch request ended (2 s): the next one follows
        name = contract.lease_name("demo-0")
        renewed = heartbeat_lease("demo-0", contract.ROLE_FOLLOWER)
        renewed["spec"]["renewTime"] = RENEWED + timedelta(seconds=5)
        leases.patch_namespaced_lease(name, namespace, renewed)
        await until(lambda: len(changes) == 2, "the renewal")
        assert changes[1].ring, "the first renewal seen confirms the record: the planner waits for it"
        records = from_observed(book.views()[0].get(key, []), "demo")
        assert [(m.pod, m.confirmed) for m in records] == [("demo-0", True)]
        renewed["spec"]["renewTime"] = RENEWED + timedelta(seconds=10)
        leases.patch_namespaced_lease(name, namespace, renewed)
        await until(lambda: len(changes) == 3, "the second renewal")
        assert not changes[2].ring and changes[2].expires is not None, "a plain renewal: only its expiry"
        leases.patch_namespaced_lease(name, namespace, heartbeat_lease("demo-0", contract.ROLE_LEADER))
        await until(lambda: len(changes) == 4, "the changed record")
        assert changes[3].ring, "a record that says something new: a round"
        await asyncio.sleep(3)  # another watch request ended on the way
        leases.delete_namespaced_lease(name, namespace)
        await until(lambda: len(changes) == 5, "the deletion")
        assert changes[4] == Change(key, name, ring=True, gone=True)
        assert book.views()[0].get(key, []) == [] and watch.relists == 0, "no gap: no second list"
    finally:
        task.cancel()
        await watch_api.close()


async def test_a_workload_api_not_served_reads_as_listed_and_empty_and_pods_reach_their_book(
        kube_apiserver: Any, namespace: str, operator_session: kube.KubeClient) -> None:
    """The bare apiserver serves no OpenKruise CRD: that watch must not hold back every round (the
    rounds wait for every first list), and a member pod's scale-away mark must reach the rounds."""
    core = client.CoreV1Api(api(kube_apiserver.kubeconfig))
    labels = {contract.LABEL_NAME: contract.MANAGER, contract.LABEL_INSTANCE: "demo"}
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})  # no controller-manager here
    core.create_namespaced_pod(namespace, {"metadata": {"name": "demo-0", "labels": labels},
                                           "spec": {"containers": [{"name": "etcd", "image": "etcd"}]}})
    workloads, pods, changes = WorkloadBook(), PodBook(), []
    watch_api = operator_session.watch_client(2)
    advanced = ObjectWatch(watch_api, watches.WORKLOADS[ADVANCED_STATEFULSET.name], "x=y", workloads, [namespace],
                           changes.append)
    members = ObjectWatch(watch_api, watches.PODS, f"{contract.LABEL_NAME}={contract.MANAGER}", pods, [namespace],
                          changes.append, watch_seconds=2)
    tasks = [asyncio.create_task(w.run()) for w in (advanced, members)]
    key = (namespace, "demo")
    try:
        await asyncio.wait_for(asyncio.gather(advanced.listed.wait(), members.listed.wait()), 20)
        assert workloads.filed == {} and [(c.key, c.ring) for c in changes] == [(key, True)]
        core.patch_namespaced_pod("demo-0", namespace, {"metadata": {"annotations": {contract.ANNOTATION_SCALE_AWAY: "t"}}})
        await until(lambda: pods.views()[0].get(key) == ["demo-0"], "the scale-away mark in the pod book")
        core.delete_namespaced_pod("demo-0", namespace, grace_period_seconds=0)
        await until(lambda: changes[-1] == Change(key, "demo-0", ring=True, gone=True), "the pod's deletion")
        assert pods.views()[0].get(key, []) == []
    finally:
        for task in tasks:
            task.cancel()
        await watch_api.close()
