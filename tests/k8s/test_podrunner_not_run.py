"""What `make run`'s pod runner cannot run is said where a user looks: Warning Events on the pod
and on its cluster (`kubectl describe`), not only in make run's own log."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from raftset import contract
from raftset.operator.pure.objects import member_service_account
from raftset.operator.pure.pod_template import pod_template
from raftset.operator.pure import certificates
from raftset.operator.pure import spec
from tests.harness.operator import api, kubectl
from tools.devcluster.podrunner import NOT_RUN_REASON, PodRunner

pytestmark = pytest.mark.k8s


def member_pod(cluster: spec.Cluster, ordinal: int) -> dict[str, Any]:
    """A pod of the operator's own template with its claim and a node, as the StatefulSet
    controller and the scheduler would make it."""
    template = pod_template(cluster)
    name = contract.pod_name(cluster.name, ordinal)
    claim = {"name": "data", "persistentVolumeClaim": {"claimName": f"data-{name}"}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {**template["metadata"], "name": name, "namespace": cluster.namespace},
            "spec": {**template["spec"], "volumes": [*template["spec"]["volumes"], claim],
                     "nodeName": "node-a", "hostname": name}}


def test_a_cert_manager_pod_is_not_run_and_the_pod_and_cluster_say_why(kube_apiserver: Any, tmp_path: Path) -> None:
    namespace = f"nr-{uuid.uuid4().hex[:6]}"
    kubectl(kube_apiserver.kubeconfig, "create", "namespace", namespace)
    body = {"apiVersion": contract.API_VERSION, "kind": contract.KIND_ETCD,
            "metadata": {"name": "kv", "namespace": namespace, "uid": "00000000-test"},
            "spec": {"replicas": 1, "tls": {"provider": "cert-manager", "issuerRef": {"name": "corp-ca"}}}}
    cluster = spec.parse(body, default_workload_kind="StatefulSet")
    core = client.CoreV1Api(api(kube_apiserver.kubeconfig))
    core.create_namespaced_service_account(namespace, {"metadata": {"name": member_service_account(cluster)}})
    # The Secrets cert-manager would fill; the runner holds no key of cert-manager's CA.
    now = datetime.now(timezone.utc)
    ca = certificates.build_ca("corp-ca", now)
    for purpose, leaf in certificates.leaf_specs("kv", namespace, 1).items():
        core.create_namespaced_secret(namespace, {
            "metadata": {"name": certificates.secret_name("kv", purpose)}, "type": "kubernetes.io/tls",
            "data": certificates.secret_data(certificates.issue(ca, leaf, now), ca.cert_pem)})
    core.create_namespaced_pod(namespace, member_pod(cluster, 0))

    runner = PodRunner(kube_apiserver.kubeconfig, tmp_path / "runner", namespace=namespace)
    try:
        runner.sync(runner._list())
        runner.sync(runner._list())  # a second round neither runs it nor says it again
        assert runner.workers == {} and runner.supervisor.procs == []
    finally:
        runner.close()
    events = core.list_namespaced_event(namespace, field_selector=f"reason={NOT_RUN_REASON}").items
    said = {(e.involved_object.kind, e.involved_object.name, e.type) for e in events}
    assert said == {("Pod", "kv-0", "Warning"), (contract.KIND_ETCD, "kv", "Warning")}, said
    assert all("cert-manager" in e.message and "kv-0" in e.message for e in events)
    described = kubectl(kube_apiserver.kubeconfig, "describe", "pod", "kv-0", "-n", namespace).stdout
    assert NOT_RUN_REASON in described and "cert-manager" in described
