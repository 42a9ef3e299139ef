"""The Helm chart against the kustomize overlays: `helm lint`, and `helm template` of each backend gives
the objects `kubectl kustomize` gives for that overlay (with the monitoring kit, for the overlay plus
the component), modulo Helm's own labels.

In the k8s tier rather than unit: they run Helm, a binary that the component build provides
(tools/devcluster/build.py HELM, built here if missing), and a build that fails fails them. No
apiserver is needed: `helm install` is the e2e tier's (tests/e2e/test_helm_install.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import helm

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "kustomize" / "components" / "monitoring"
# The labels only Helm writes, and kustomize's managed-by, which Helm writes as "Helm".
HELM_LABELS = {"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart"}
# `helm install --create-namespace` creates the release's namespace: the chart holds no Namespace.
NOT_IN_THE_CHART = {"Namespace"}


def kustomize(path: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with its built-in kustomize) is required for these tests"
    done = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def overlay_with_monitoring(overlay: str, tmp_path: Path) -> Path:
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(ROOT / "kustomize" / "overlays" / overlay, tmp_path)],
        "components": [os.path.relpath(MONITORING, tmp_path)]}))
    return tmp_path


def by_object(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Each object by kind and name, without Helm's labels (and an empty label map, then, dropped)."""
    objects = {}
    for doc in docs:
        if doc["kind"] in NOT_IN_THE_CHART:
            continue
        meta = doc["metadata"]
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in HELM_LABELS}
        meta.pop("labels", None)
        if labels:
            meta["labels"] = labels
        objects[(doc["kind"], meta["name"])] = doc
    return objects


def differences(chart: list[dict[str, Any]], overlay: list[dict[str, Any]]) -> list[str]:
    ours, theirs = by_object(chart), by_object(overlay)
    found = [f"only in the chart: {key}" for key in sorted(ours.keys() - theirs.keys())]
    found += [f"only in the overlay: {key}" for key in sorted(theirs.keys() - ours.keys())]
    for key in sorted(ours.keys() & theirs.keys()):
        if ours[key] != theirs[key]:
            found.append(f"{key} differs:\nchart:   {json.dumps(ours[key], sort_keys=True)[:1500]}\n"
                         f"overlay: {json.dumps(theirs[key], sort_keys=True)[:1500]}")
    return found


@pytest.mark.parametrize("backend", ["statefulset", "kruise"])
def test_helm_template_of_each_backend_is_its_overlay(backend: str) -> None:
    rendered = helm.template(backend=json.dumps(backend))
    assert not differences(rendered, kustomize(ROOT / "kustomize" / "overlays" / backend)), \
        "\n".join(differences(rendered, kustomize(ROOT / "kustomize" / "overlays" / backend)))


@pytest.mark.parametrize("backend", ["statefulset", "kruise"])
def test_with_monitoring_it_is_the_overlay_plus_the_component(backend: str, tmp_path: Path) -> None:
    rendered = helm.template(backend=json.dumps(backend), **{"monitoring.enabled": "true"})
    found = differences(rendered, kustomize(overlay_with_monitoring(backend, tmp_path)))
    assert not found, "\n".join(found)


def test_a_changed_value_is_a_difference() -> None:
    """The comparison sees what a value changes (so a template that ignored its values would not pass above)."""
    rendered = helm.template(replicas="3")
    found = differences(rendered, kustomize(ROOT / "kustomize" / "overlays" / "statefulset"))
    assert len(found) == 1 and found[0].startswith("('Deployment', 'raftset-operator') differs"), found


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def test_the_values_reach_the_objects() -> None:
    docs = helm.template(**{
        "image.repository": '"registry.example/raftset"', "image.tag": '"0.2.0"', "image.pullPolicy": '"Always"',
        "replicas": "1", "resources": '{"limits": {"memory": "1Gi"}}',
        "extraArgs": '["--namespace=team-a"]', "extraEnv": '[{"name": "LOG_LEVEL", "value": "debug"}]',
        "secretsNamespaces": '["team-a", "team-b"]'})
    container = operator_container(docs)
    assert container["image"] == "registry.example/raftset:0.2.0" and container["imagePullPolicy"] == "Always"
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}}
    assert container["args"] == ["--liveness=http://0.0.0.0:8080/healthz", "--leader-elect", "--namespace=team-a"]
    assert container["env"][-1] == {"name": "LOG_LEVEL", "value": "debug"}
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 1
    # Each: what `kubectl create rolebinding raftset-operator-secrets -n NAMESPACE ...` of docs/install.md makes.
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    assert [(b["metadata"]["name"], b["metadata"]["namespace"]) for b in bindings] == [
        ("raftset-operator-secrets", "team-a"), ("raftset-operator-secrets", "team-b")]
    for binding in bindings:
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                      "name": "raftset-operator-secrets"}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "raftset-operator",
                                        "namespace": helm.NAMESPACE}]


def test_the_image_tag_defaults_to_the_app_version() -> None:
    chart = yaml.safe_load((helm.CHART / "Chart.yaml").read_text())
    assert operator_container(helm.template())["image"] == f"ghcr.io/raftset/raftset:{chart['appVersion']}"


def test_an_unknown_backend_is_refused() -> None:
    done = helm.run("template", helm.RELEASE, str(helm.CHART), "--set", "backend=advanced", check=False)
    assert done.returncode != 0 and "backend must be statefulset or kruise" in done.stderr, done.stderr


@pytest.mark.parametrize("values", [{}, {"backend": '"kruise"', "monitoring.enabled": "true",
                                         "secretsNamespaces": '["team-a"]'}])
def test_helm_lint_passes(values: dict[str, str]) -> None:
    done = helm.run("lint", "--strict", str(helm.CHART), *helm.set_args(values), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_helm_lint_fails_a_broken_chart(tmp_path: Path) -> None:
    broken = tmp_path / "raftset"
    shutil.copytree(helm.CHART, broken)
    (broken / "Chart.yaml").write_text((broken / "Chart.yaml").read_text().replace("version: 0.1.0", "version: one"))
    done = helm.run("lint", "--strict", str(broken), check=False)
    assert done.returncode != 0, done.stdout
