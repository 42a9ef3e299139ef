"""The chart installed with `helm install` on the full plane, then upgraded to the next chart release.

As in tests/e2e/test_install_matrix.py, the Deployment's pods are kwok's (running nothing): the operator
container runs as a local process from the Deployment Helm installed, with only its ServiceAccount's
rights (tests/harness/install.py). A roll is what the kubelet would do with it: the old process stops,
one from the new Deployment starts.

"Previous" and "next": the previous release is the committed chart (its Chart.yaml version and its
appVersion, the image tag). The next is a copy of it as the following patch release, version and
appVersion +0.0.1, which is what a release changes: the operator's image and the chart's label.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from raftset import contract
from tests.harness import helm
from tests.harness.install import apply_overlay, started_operator
from tests.harness.operator import Sidecars, kubectl, wait_for
from tests.harness.view import ClusterView

pytestmark = pytest.mark.e2e

TIMEOUT = 90
OPERATOR = "raftset-operator"
# The install every other test module of this plane runs on (tests/e2e/test_install_matrix.py KRUISE_RBAC).
SHARED_OVERLAY = "kruise"


def available(view: ClusterView) -> bool:
    return view.condition("Available").get("status") == "True"


def next_release(tmp_path: Path) -> tuple[Path, str]:
    """A copy of the committed chart as its next patch release; returns it and its version."""
    chart = tmp_path / "raftset"
    shutil.copytree(helm.CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    major, minor, patch = meta["version"].split(".")
    meta["version"] = meta["appVersion"] = f"{major}.{minor}.{int(patch) + 1}"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return chart, meta["version"]


def live_deployment(admin: str) -> dict[str, Any]:
    out = kubectl(admin, "get", "deployment", OPERATOR, "-n", helm.NAMESPACE, "-o", "yaml").stdout
    return yaml.safe_load(out)


def image(deployment: dict[str, Any]) -> str:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return str(container["image"])


def members(view: ClusterView) -> dict[str, Any]:
    """What a roll of the members would change: their pods and their workload's generation and template."""
    workload = view.workload()
    return {"pods": {p.metadata.name: p.metadata.uid for p in view.pod_objects()},
            "generation": workload["metadata"]["generation"], "template": workload["spec"]["template"]}


@pytest.fixture
def release(control_plane: Any) -> Iterator[str]:
    """The release's name; afterwards it is uninstalled (Helm keeps the CRDs) and the shared overlay
    applied again, with no Deployment (as tests/harness/install.py leaves it)."""
    admin = str(control_plane.kubeconfig)
    yield helm.RELEASE
    helm.run("uninstall", helm.RELEASE, "-n", helm.NAMESPACE, "--ignore-not-found", kubeconfig=admin, check=False)
    apply_overlay(admin, SHARED_OVERLAY)
    kubectl(admin, "delete", "deployment", OPERATOR, "-n", helm.NAMESPACE, "--ignore-not-found", check=False)


def test_helm_install_makes_a_cluster_available_and_an_upgrade_rolls_only_the_operator(
        control_plane: Any, namespace: str, tmp_path: Path, release: str) -> None:
    admin = str(control_plane.kubeconfig)
    values = helm.set_args({"secretsNamespaces": f'["{namespace}"]'})
    # This plane already holds the kustomize install of the other tests: Helm adopts those objects
    # (--take-ownership), as a user moving from `kubectl apply -k` to Helm does.
    helm.run("install", release, str(helm.CHART), "-n", helm.NAMESPACE, "--create-namespace", "--take-ownership",
             *values, kubeconfig=admin)
    installed = live_deployment(admin)
    previous = yaml.safe_load((helm.CHART / "Chart.yaml").read_text())["appVersion"]
    assert image(installed) == f"ghcr.io/raftset/raftset:{previous}"
    can_i = kubectl(admin, "auth", "can-i", "get", "secrets", "-n", namespace,
                    f"--as=system:serviceaccount:{helm.NAMESPACE}:{OPERATOR}", check=False)
    assert can_i.stdout.strip() == "yes", "the secretsNamespaces RoleBinding"

    pod = started_operator(admin, installed, control_plane.host, tmp_path / "operator-previous")
    try:
        demo = ClusterView(admin, contract.KIND_ETCD, "demo", namespace)
        demo.create(3)
        with Sidecars(demo.api, namespace, demo.name, leader=1):
            demo.wait_pods(0, 1, 2)
            wait_for(lambda: available(demo), TIMEOUT, "demo Available")
            assert demo.status()["workloadKind"] == "StatefulSet"  # the chart's default backend
            before = members(demo)

            chart, version = next_release(tmp_path)
            helm.run("upgrade", release, str(chart), "-n", helm.NAMESPACE, *values, kubeconfig=admin)
            upgraded = live_deployment(admin)
            assert image(upgraded) == f"ghcr.io/raftset/raftset:{version}"
            assert upgraded["metadata"]["generation"] == installed["metadata"]["generation"] + 1
            kubectl(admin, "rollout", "status", f"deployment/{OPERATOR}", "-n", helm.NAMESPACE, "--timeout=90s")
            pod.close()  # the roll deletes the old pod...
            pod = started_operator(admin, upgraded, control_plane.host, tmp_path / "operator-next")  # ...starts one
            # The new operator has reconciled the cluster once (kopf's resume handler: a forced reconcile).
            wait_for(lambda: "Handler 'etcd-resume' succeeded" in pod.log.read_text(), TIMEOUT,
                     "the upgraded operator's first reconcile")
            assert members(demo) == before, "the upgrade touched the members"
            assert available(demo)
    finally:
        pod.close()
