"""The install matrix on a bare kube-apiserver: each overlay as docs/install.md installs it, the
operator with only its ServiceAccount's rights, with and without OpenKruise's CRD.

Without workload controllers no pod runs, so a cluster here is reconciled (its workload
applied) or fails with the documented condition; Available is the e2e tier's half of the
matrix (tests/e2e/test_install_matrix.py), where OpenKruise is always installed. In every cell
the operator process never exits.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from raftset import contract
from tests.harness.install import KRUISE_CRD, assert_never_exited, installed_operator, kruise_crd
from tests.harness.operator import api, kubectl, wait_for
from tests.harness.view import ClusterView
from tools.devcluster import operatorpod, plane

pytestmark = pytest.mark.k8s

TIMEOUT = 60


@pytest.fixture(scope="module")
def admin(kube_apiserver: Any) -> str:
    return str(kube_apiserver.kubeconfig)


@pytest.fixture(scope="module")
def crds(kube_apiserver: Any) -> list[dict[str, Any]]:
    return plane.kruise_manifests(kube_apiserver)[0]


def kruise_crd_state(admin: str) -> dict[str, Any] | None:
    """The Advanced StatefulSet CRD as the apiserver has it now, None once it is gone."""
    try:
        return client.ApiextensionsV1Api(api(admin)).read_custom_resource_definition(KRUISE_CRD).to_dict()
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


# A CRD's deletion first deletes every object of its kind and polls until they are gone: on a
# loaded machine that took over 60 s (CI rehearsal), and it is the apiserver's pace, not ours.
CRD_GONE_S = 300


def remove_kruise_crd(admin: str) -> None:
    """Deleted and gone."""
    kubectl(admin, "delete", "crd", KRUISE_CRD, "--ignore-not-found", "--wait=false")
    wait_for(lambda: kruise_crd_state(admin) is None, CRD_GONE_S, f"{KRUISE_CRD} gone")


@pytest.fixture
def without_kruise(admin: str) -> None:
    remove_kruise_crd(admin)


@pytest.fixture
def with_kruise(kube_apiserver: Any, admin: str, crds: list[dict[str, Any]]) -> Iterator[None]:
    """OpenKruise's Advanced StatefulSet CRD, as a cluster running OpenKruise for other workloads has it."""
    # An earlier test's CRD may still be terminating: applied over, it would vanish under this test.
    wait_for(lambda: not ((kruise_crd_state(admin) or {}).get("metadata") or {}).get("deletion_timestamp"),
             CRD_GONE_S, f"{KRUISE_CRD} not terminating")
    kube_apiserver.apply(kruise_crd(crds))

    def established() -> bool:
        conditions = ((kruise_crd_state(admin) or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
    wait_for(established, TIMEOUT, f"{KRUISE_CRD} Established")
    yield
    remove_kruise_crd(admin)


def degraded_reason(view: ClusterView) -> str | None:
    found = view.condition("Degraded")
    return found.get("reason") if found.get("status") == "True" else None


def wait_degraded(view: ClusterView, reason: str) -> dict[str, Any]:
    wait_for(lambda: degraded_reason(view) == reason, TIMEOUT, f"{view.name} Degraded={reason}")
    return view.condition("Degraded")


def wait_applied(view: ClusterView, api_version: str) -> dict[str, Any]:
    """The cluster's workload, once the operator has applied it (the reconcile got through)."""
    return wait_for(lambda: (w := view.workload()) and w["apiVersion"] == api_version and w, TIMEOUT,
                    f"the {api_version} workload of {view.name}")


def warning_events(view: ClusterView, reason: str) -> list[str]:
    return [message for said, message in view.events() if said == reason]


def metric(pod: operatorpod.OperatorPod, name: str, labels: dict[str, str]) -> float | None:
    text = urllib.request.urlopen(f"http://{pod.spec.env['RAFTSET_METRICS_ADDRESS']}/metrics", timeout=5).read()
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None


def clusters(admin: str, namespace: str) -> tuple[ClusterView, ClusterView]:
    """A cluster of the overlay's default workload kind, and one asking for Advanced StatefulSet."""
    default = ClusterView(admin, contract.KIND_ETCD, "default-kind", namespace)
    advanced = ClusterView(admin, contract.KIND_ETCD, "advanced", namespace, "AdvancedStatefulSet")
    default.create(3)
    advanced.create(3)
    return default, advanced


def test_statefulset_overlay_without_openkruise(kube_apiserver: Any, admin: str, without_kruise: None,
                                                namespace: str, tmp_path: Path) -> None:
    with installed_operator(admin, "statefulset", kube_apiserver.host, tmp_path / "op") as pod:
        default, advanced = clusters(admin, namespace)
        wait_applied(default, "apps/v1")
        started = time.monotonic()
        condition = wait_degraded(advanced, "WorkloadKindNotEnabled")
        assert "AdvancedStatefulSet" in condition["message"] and "kruise overlay" in condition["message"]
        wait_for(lambda: warning_events(advanced, "WorkloadKindNotEnabled"), TIMEOUT, "the Warning Event")
        assert_never_exited(pod, started)


def test_statefulset_overlay_where_openkruise_is_installed(kube_apiserver: Any, admin: str, with_kruise: None,
                                                           namespace: str, tmp_path: Path) -> None:
    """The reported crash loop: the operator watched Advanced StatefulSets it may not list."""
    with installed_operator(admin, "statefulset", kube_apiserver.host, tmp_path / "op") as pod:
        default, advanced = clusters(admin, namespace)
        wait_applied(default, "apps/v1")
        assert_never_exited(pod, time.monotonic())
        assert "Forbidden" not in pod.log.read_text(), "it never even tries what its RBAC forbids"
        wait_degraded(advanced, "WorkloadKindNotEnabled")


def test_a_forbidden_watch_is_a_condition_and_a_metric(kube_apiserver: Any, admin: str, with_kruise: None,
                                                       namespace: str, tmp_path: Path) -> None:
    """Both backends enabled under the statefulset overlay's RBAC: the Advanced StatefulSet watch is
    forbidden. Only the clusters that need it are Degraded; the others are reconciled."""
    with installed_operator(admin, "statefulset", kube_apiserver.host, tmp_path / "op",
                            RAFTSET_BACKENDS="StatefulSet,AdvancedStatefulSet") as pod:
        default, advanced = clusters(admin, namespace)
        wait_applied(default, "apps/v1")
        started = time.monotonic()
        condition = wait_degraded(advanced, "WatchForbidden")
        assert KRUISE_CRD in condition["message"], condition
        labels = {"resource": KRUISE_CRD}
        assert metric(pod, "raftset_operator_watch_forbidden", labels) == 1.0
        assert f"may not list and watch {KRUISE_CRD}" in pod.log.read_text()
        assert_never_exited(pod, started)


def test_kruise_overlay_with_openkruise_then_without(kube_apiserver: Any, admin: str, with_kruise: None,
                                                     namespace: str, tmp_path: Path) -> None:
    """The kruise overlay where the CRD exists, then the CRD removed under the running operator."""
    with installed_operator(admin, "kruise", kube_apiserver.host, tmp_path / "op") as pod:
        default = ClusterView(admin, contract.KIND_ETCD, "default-kind", namespace)
        default.create(3)
        wait_applied(default, "apps.kruise.io/v1beta1")
        started = time.monotonic()
        remove_kruise_crd(admin)
        later = ClusterView(admin, contract.KIND_ETCD, "later", namespace)
        later.create(3)
        condition = wait_degraded(later, "WorkloadAPIMissing")
        assert "install OpenKruise" in condition["message"]
        plain = ClusterView(admin, contract.KIND_ETCD, "plain", namespace, "StatefulSet")
        plain.create(3)
        wait_applied(plain, "apps/v1")
        assert_never_exited(pod, started)


def test_kruise_overlay_without_openkruise(kube_apiserver: Any, admin: str, without_kruise: None,
                                           namespace: str, tmp_path: Path) -> None:
    with installed_operator(admin, "kruise", kube_apiserver.host, tmp_path / "op") as pod:
        default, _ = clusters(admin, namespace)
        plain = ClusterView(admin, contract.KIND_ETCD, "plain", namespace, "StatefulSet")
        plain.create(3)
        wait_applied(plain, "apps/v1")
        started = time.monotonic()
        condition = wait_degraded(default, "WorkloadAPIMissing")
        assert "install OpenKruise" in condition["message"]
        wait_for(lambda: warning_events(default, "WorkloadAPIMissing"), TIMEOUT, "the Warning Event")
        assert_never_exited(pod, started)
