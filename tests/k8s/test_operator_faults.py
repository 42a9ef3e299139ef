"""Operator faults of issue 11 against a real kube-apiserver and the real operator (no controllers).

f: a sidecar whose clock is 60 s behind renews its Lease on time, but every renewTime it
writes is a minute old: the operator must count it alive (freshness is measured from the
renewals it observes) and keep scaling. i: a pod with the cluster's labels and an
unexpected name, even one carrying the scale-away mark, never wedges a reconcile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from kubernetes import client

from raftset import contract
from raftset.sidecar.pure.heartbeat import Heartbeat, lease_body, rfc3339
from tests.harness.operator import Operator, api, member_id, membership_lease, wait_for
from tests.harness.objects import condition, create

pytestmark = pytest.mark.k8s

SKEW = timedelta(seconds=60)
LEASE_SECONDS = 30  # shorter than the skew: by its renewTime every heartbeat is already stale
MAX_ERRORS = 5  # failed renewal rounds the stand-in may have (an API hiccup) before the test fails


class Renewals:
    """The stand-in's failed renewal rounds; `wait` ends as soon as there are too many."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def assert_ok(self) -> None:
        assert len(self.errors) < MAX_ERRORS, f"the skewed sidecars' renewals keep failing: {self.errors[-3:]}"

    def wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        """wait_for, but a stand-in that stopped renewing fails the test at once and says why,
        instead of surfacing as a timeout of whatever the test waited for."""
        found = wait_for(lambda: len(self.errors) >= MAX_ERRORS or predicate(), timeout, what)
        self.assert_ok()
        return found


@contextmanager
def skewed_sidecars(api_client: client.ApiClient, namespace: str, cluster: str, ordinals: range,
                    leader: int) -> Iterator[Renewals]:
    """Renew each member's heartbeat Lease every second, as a sidecar whose clock runs SKEW
    behind would: the Lease shape and the renewTime come from the sidecar's own code, fed the
    sidecar's (wrong) time. The leader's membership Lease is published too."""
    leases = client.CoordinationV1Api(api_client)
    stop, renewals = threading.Event(), Renewals()

    def apply(body: dict[str, Any]) -> None:
        leases.patch_namespaced_lease(body["metadata"]["name"], namespace, body, field_manager="raftset-sidecar",
                                      force=True, _content_type="application/apply-patch+yaml")

    def run() -> None:
        index = 1
        while not stop.wait(1.0):
            try:
                sidecar_clock = datetime.now(timezone.utc) - SKEW
                for o in ordinals:
                    pod = contract.pod_name(cluster, o)
                    beat = Heartbeat(member_id=member_id(o), name=pod, healthy=True, raft_term=2, raft_index=index,
                                     raft_applied_index=index,
                                     role=contract.ROLE_LEADER if o == leader else contract.ROLE_FOLLOWER,
                                     time=rfc3339(sidecar_clock), cluster_id="c1", ready=True, ready_reason="")
                    apply(lease_body(pod, namespace, cluster, beat, duration=LEASE_SECONDS, owner=None))
                apply(membership_lease(namespace, cluster, leader, {o: False for o in ordinals}, index))
                index += 1
            except Exception as error:  # noqa: BLE001 - asserted by Renewals.wait and below
                renewals.errors.append(repr(error))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield renewals
    finally:
        stop.set()
        thread.join(timeout=10)
    renewals.assert_ok()


def test_a_sidecar_whose_clock_is_60_s_behind_stalls_nothing(kube_apiserver: Any, bare_operator: Operator,
                                                             namespace: str) -> None:
    """Before the fix every heartbeat here was stale by its renewTime: NoLeader, and the
    scale-in waited 'for a leader before removing a member' forever."""
    kubeconfig = kube_apiserver.kubeconfig
    create(kubeconfig, "EtcdCluster", "skew", namespace, workloadKind="StatefulSet")
    custom = client.CustomObjectsApi(api(kubeconfig))
    apps = client.AppsV1Api(api(kubeconfig))
    # A scale-in step reads the pods (its quorum guard believes them over a heartbeat): no kubelet
    # here, so they are created Running, as a kubelet would report them.
    core = client.CoreV1Api(api(kubeconfig))
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})
    for ordinal in range(3):
        pod = contract.pod_name("skew", ordinal)
        core.create_namespaced_pod(namespace, {"metadata": {"name": pod, "labels": contract.selector_labels("skew")},
                                               "spec": {"containers": [{"name": "etcd", "image": "etcd"}]}})
        core.patch_namespaced_pod_status(pod, namespace, {"status": {"phase": "Running"}})

    def obj() -> dict[str, Any]:
        return custom.get_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters",
                                                   "skew")

    with skewed_sidecars(api(kubeconfig), namespace, "skew", range(3), leader=1) as renewals:
        renewals.wait(lambda: condition(obj(), "Available").get("status") == "True", 60,
                      "Available with skewed clocks")
        assert obj()["status"]["leader"] == "skew-1"
        assert all(m["healthy"] for m in obj()["status"]["members"]) and len(obj()["status"]["members"]) == 3
        custom.patch_namespaced_custom_object_scale(
            contract.GROUP, contract.VERSION, namespace, "etcdclusters", "skew", {"spec": {"replicas": 2}})
        renewals.wait(lambda: apps.read_namespaced_stateful_set("skew", namespace).spec.replicas == 2, 60,
                      "the scale-in step, planned on heartbeats renewed a minute 'ago'")
        assert condition(obj(), "Available").get("status") == "True"


def test_a_stray_pod_with_the_clusters_labels_never_wedges_reconciles(kube_apiserver: Any, bare_operator: Operator,
                                                                      namespace: str) -> None:
    """Before the fix the stray's scale-away mark raised ValueError in every reconcile: the
    StatefulSet never followed the spec again."""
    kubeconfig = kube_apiserver.kubeconfig
    create(kubeconfig, "EtcdCluster", "stray", namespace, workloadKind="StatefulSet")
    apps = client.AppsV1Api(api(kubeconfig))
    core = client.CoreV1Api(api(kubeconfig))
    wait_for(lambda: apps.read_namespaced_stateful_set("stray", namespace), 30, "the StatefulSet")
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})  # no controllers here
    versions = {}
    for name in ("stray-canary", "stray-0-debug"):
        versions[name] = core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": contract.selector_labels("stray"),
                         "annotations": {contract.ANNOTATION_SCALE_AWAY: "true"}},
            "spec": {"containers": [{"name": "debug", "image": "busybox"}]}}).metadata.resource_version
    custom = client.CustomObjectsApi(api(kubeconfig))
    custom.patch_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters", "stray",
                                          {"spec": {"podTemplate": {"labels": {"team": "storage"}}}})
    wait_for(lambda: (apps.read_namespaced_stateful_set("stray", namespace).spec.template.metadata.labels or {})
             .get("team") == "storage", 30, "the template change applied past the stray pods")

    def observed() -> dict[str, Any] | None:
        found = custom.get_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters", "stray")
        return found if found["status"].get("observedGeneration") == found["metadata"]["generation"] else None
    wait_for(observed, 30, "the status of that reconcile (it is patched after the workload)")
    # The operator writes scale-away marks itself (and removes them): a stray's must stay untouched,
    # and so must the rest of the pod: nothing wrote to either stray since the test created it.
    for name, version in versions.items():
        assert core.read_namespaced_pod(name, namespace).metadata.resource_version == version, \
            f"{name}: a stray is left alone"
