"""Status names the real cause (issue 14 item 5) and warns about an even size (item 6), against a
real kube-apiserver and the real operator, without controllers.

With no controllers the test writes what they would: the member claims the StatefulSet
controller makes from the template, and a pod's status as a kubelet reports it.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from kubernetes import client

from raftset import contract
from tests.harness.operator import Operator, api, kubectl, wait_for
from tests.harness.objects import condition, create
from tools.devcluster import podrunner

pytestmark = pytest.mark.k8s


def cluster_obj(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    return custom.get_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters", name)


def warnings(core: client.CoreV1Api, namespace: str, name: str) -> list[tuple[str, str]]:
    found = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return [(e.reason, e.message) for e in found.items if e.type == "Warning"]


def test_an_even_size_gets_a_warning_with_the_quorum_arithmetic(kube_apiserver: Any, bare_operator: Operator,
                                                               namespace: str) -> None:
    """Before: replicas 4 was accepted without a word."""
    kubeconfig = kube_apiserver.kubeconfig
    create(kubeconfig, "EtcdCluster", "even", namespace, workloadKind="StatefulSet", replicas=4)
    custom, core = client.CustomObjectsApi(api(kubeconfig)), client.CoreV1Api(api(kubeconfig))
    odd = wait_for(lambda: (c := condition(cluster_obj(custom, namespace, "even"), "OddReplicas")) and c, 30,
                   "the OddReplicas condition")
    assert (odd["status"], odd["reason"]) == ("False", "EvenReplicas")
    assert "every write needs 3 members, so only 1 may fail, as with 3" in odd["message"]
    wait_for(lambda: any(r == "EvenReplicas" for r, _ in warnings(core, namespace, "even")), 30, "the Warning Event")
    custom.patch_namespaced_custom_object_scale(contract.GROUP, contract.VERSION, namespace, "etcdclusters", "even",
                                                {"spec": {"replicas": 5}})
    wait_for(lambda: condition(cluster_obj(custom, namespace, "even"), "OddReplicas")["status"] == "True", 30,
             "OddReplicas=True at 5")


def test_a_pending_claim_of_a_missing_storage_class_is_named(kube_apiserver: Any, bare_operator: Operator,
                                                             namespace: str) -> None:
    """Before: only NoLeader / 'waiting for ordinal 0 to join'."""
    kubeconfig = kube_apiserver.kubeconfig
    create(kubeconfig, "EtcdCluster", "noclass", namespace, workloadKind="StatefulSet", replicas=1,
           storage={"storageClassName": "does-not-exist"})
    core, custom = client.CoreV1Api(api(kubeconfig)), client.CustomObjectsApi(api(kubeconfig))
    core.create_namespaced_persistent_volume_claim(namespace, {  # as the StatefulSet controller makes it
        "metadata": {"name": "data-noclass-0", "labels": contract.selector_labels("noclass")},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "does-not-exist",
                 "resources": {"requests": {"storage": "1Gi"}}}})
    degraded = wait_for(lambda: (c := condition(cluster_obj(custom, namespace, "noclass"), "Degraded"))
                        .get("reason") == "StorageClassMissing" and c, 60, "Degraded=StorageClassMissing")
    assert "'does-not-exist'" in degraded["message"] and "data-noclass-0" in degraded["message"]
    wait_for(lambda: any(r == "StorageClassMissing" for r, _ in warnings(core, namespace, "noclass")), 30,
             "the Warning Event")


def test_a_running_pod_whose_store_never_started_is_named(kube_apiserver: Any, bare_operator: Operator,
                                                          namespace: str) -> None:
    kubeconfig = kube_apiserver.kubeconfig
    create(kubeconfig, "EtcdCluster", "silent", namespace, workloadKind="StatefulSet", replicas=1,
           storage={"ephemeral": True})
    core = client.CoreV1Api(api(kubeconfig))
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})  # no controllers here
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "silent-0", "labels": contract.selector_labels("silent")},
        "spec": {"containers": [{"name": "etcd", "image": "etcd"}]}})
    started = datetime.now(timezone.utc) - timedelta(minutes=5)
    core.patch_namespaced_pod_status("silent-0", namespace, {"status": {  # what the kubelet reports
        "phase": "Running", "startTime": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "containerStatuses": [{"name": "etcd", "image": "etcd", "imageID": "", "ready": False, "restartCount": 7,
                               "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}}}]}})
    crds = client.CustomObjectsApi(api(kubeconfig))
    degraded = wait_for(lambda: (c := condition(cluster_obj(crds, namespace, "silent"), "Degraded"))
                        .get("reason") == "StoreNeverStarted" and c, 60, "Degraded=StoreNeverStarted")
    assert "silent-0 has been Running" in degraded["message"]
    assert "CrashLoopBackOff back-off 5m0s" in degraded["message"]


def test_what_make_run_cannot_run_is_a_condition_on_the_cluster(kube_apiserver: Any, bare_operator: Operator,
                                                                namespace: str) -> None:
    """Before: make run's pod runner said `NotRunLocally` only in a Warning Event; the cluster's
    condition said "waiting for ordinal 0 to join" and `kubectl describe etcdc` did not name why."""
    kubeconfig = kube_apiserver.kubeconfig
    create(kubeconfig, "EtcdCluster", "unrun", namespace, workloadKind="StatefulSet", replicas=1,
           storage={"ephemeral": True})
    core = client.CoreV1Api(api(kubeconfig))
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})  # no controllers here
    created = core.create_namespaced_pod(namespace, {
        "metadata": {"name": "unrun-0", "labels": {**contract.selector_labels("unrun"),
                                                    contract.LABEL_ENGINE: "etcd"}},
        "spec": {"containers": [{"name": "etcd", "image": "etcd"}]}})
    started = datetime.now(timezone.utc) - timedelta(minutes=5)
    core.patch_namespaced_pod_status("unrun-0", namespace, {"status": {  # what kwok reports
        "phase": "Running", "startTime": started.strftime("%Y-%m-%dT%H:%M:%SZ")}})
    meta = {"name": "unrun-0", "namespace": namespace, "uid": created.metadata.uid,
            "labels": created.metadata.labels}
    for event in podrunner.not_run_events(meta, "no key of cert-manager's CA to sign for 127.0.0.10",
                                          datetime.now(timezone.utc)):
        core.create_namespaced_event(namespace, event)
    custom = client.CustomObjectsApi(api(kubeconfig))
    degraded = wait_for(lambda: (c := condition(cluster_obj(custom, namespace, "unrun"), "Degraded"))
                        .get("reason") == "StoreNeverStarted" and c, 60, "Degraded=StoreNeverStarted")
    assert f"its latest Warning Event: {podrunner.NOT_RUN_REASON}: unrun-0: not run by make run's pod runner: " \
           "no key of cert-manager's CA" in degraded["message"]
    described = kubectl(kubeconfig, "describe", "etcdc", "unrun", "-n", namespace).stdout
    assert podrunner.NOT_RUN_REASON in described
