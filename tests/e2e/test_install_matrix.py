"""The install matrix where pods run: each overlay as docs/install.md installs it, on the full
plane (which always has OpenKruise), the operator with only its ServiceAccount's rights.

Each overlay's default cluster becomes Available; under the statefulset overlay a cluster asking
for Advanced StatefulSet is Degraded (WorkloadKindNotEnabled) and nothing else is affected. The
operator never exits. The cells without OpenKruise's CRDs are the k8s tier's
(tests/k8s/test_install_matrix.py): this plane's OpenKruise stays installed for the other tests.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from raftset import contract
from tests.harness.install import assert_never_exited, installed_operator
from tests.harness.operator import Sidecars, kubectl, wait_for
from tests.harness.view import ClusterView

pytestmark = pytest.mark.e2e

TIMEOUT = 90
KRUISE_RBAC = "kruise"  # the overlay every other test module's RBAC (tests/e2e/test_tls_rbac.py) is


def available(view: ClusterView) -> bool:
    return view.condition("Available").get("status") == "True"


@pytest.fixture(scope="module", autouse=True)
def kruise_rbac_again(control_plane: Any) -> Any:
    """The statefulset overlay takes the kruise rule out of the shared ClusterRole: put it back."""
    yield
    kubectl(str(control_plane.kubeconfig), "apply", "--server-side", "--force-conflicts", "-k",
            str(Path(__file__).resolve().parents[2] / "kustomize" / "overlays" / KRUISE_RBAC))
    kubectl(str(control_plane.kubeconfig), "delete", "deployment", "raftset-operator", "-n", "raftset-system",
            "--ignore-not-found")


@pytest.mark.parametrize(("overlay", "kind"), [("statefulset", "StatefulSet"), ("kruise", "AdvancedStatefulSet")])
def test_each_overlay_where_openkruise_is_installed(control_plane: Any, namespace: str, tmp_path: Path,
                                                    overlay: str, kind: str) -> None:
    admin = str(control_plane.kubeconfig)
    with installed_operator(admin, overlay, control_plane.host, tmp_path / "op") as pod:
        started = time.monotonic()
        demo = ClusterView(admin, contract.KIND_ETCD, "demo", namespace)  # the overlay's default kind
        demo.create(3)
        with Sidecars(demo.api, namespace, demo.name, leader=1):
            demo.wait_pods(0, 1, 2)
            wait_for(lambda: available(demo), TIMEOUT, "demo Available")
            assert demo.status()["workloadKind"] == kind
        if overlay == "statefulset":
            other = ClusterView(admin, contract.KIND_ETCD, "advanced", namespace, "AdvancedStatefulSet")
            other.create(3)
            wait_for(lambda: other.condition("Degraded").get("reason") == "WorkloadKindNotEnabled", TIMEOUT,
                     "advanced Degraded=WorkloadKindNotEnabled")
        assert_never_exited(pod, started)
