"""`make run`'s operator container, read from the overlay's Deployment as kubelet would run it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.devcluster import operatorpod

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def rendered_deployment(overlay: str) -> dict[str, Any]:
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / "kustomize" / "overlays" / overlay)],
                         capture_output=True, text=True, check=True).stdout
    return next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment")


@pytest.mark.parametrize(("overlay", "kind", "backends"), [
    ("kruise", "AdvancedStatefulSet", "StatefulSet,AdvancedStatefulSet"), ("statefulset", "StatefulSet", "StatefulSet")])
def test_the_overlays_deployment_runs_on_loopback_with_its_env_and_identity(overlay: str, kind: str,
                                                                            backends: str) -> None:
    spec = operatorpod.container_spec(rendered_deployment(overlay), host="127.70.1.1",
                                      ports={8080: 41000, 8081: 41001}, bin_dir=Path("/venv/bin"))
    assert spec.argv[:2] == ("/venv/bin/raftset-operator", "--liveness=http://127.70.1.1:41000/healthz")
    assert spec.env == {"RAFTSET_DEFAULT_WORKLOAD_KIND": kind, "RAFTSET_BACKENDS": backends,
                        "POD_NAMESPACE": "raftset-system",
                        "RAFTSET_METRICS_ADDRESS": "127.70.1.1:41001",  # the metrics port, on loopback
                        "POD_NAME": "raftset-operator-local"}  # the leader-election identity
    assert (spec.namespace, spec.service_account) == ("raftset-system", "raftset-operator")
    assert spec.liveness_url == "http://127.70.1.1:41000/healthz"  # the probe's named port, mapped
    assert (spec.liveness_period_s, spec.liveness_failures, spec.liveness_delay_s) == (20, 3, 10)


def deployment(**container: Any) -> dict[str, Any]:
    base = {"name": "operator", "command": ["raftset-operator"]}
    return {"metadata": {"name": "op", "namespace": "ns"},
            "spec": {"template": {"spec": {"containers": [{**base, **container}]}}}}


def test_a_bind_on_every_address_without_a_container_port_is_refused() -> None:
    with pytest.raises(ValueError, match="binds every address"):
        operatorpod.container_spec(deployment(args=["--liveness=http://0.0.0.0:9999/healthz"]),
                                   host="127.70.1.1", ports={8080: 41000}, bin_dir=Path("/b"))


@pytest.mark.parametrize(("container", "message"), [
    ({"command": []}, "names no command"),
    ({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}, "only values"),
    ({"name": "other"}, "no 'operator' container"),
])
def test_what_cannot_run_locally_is_named(container: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        operatorpod.container_spec(deployment(**container), host="127.70.1.1", ports={}, bin_dir=Path("/b"))


def test_defaults_without_probe_or_service_account() -> None:
    spec = operatorpod.container_spec(deployment(), host="127.70.1.1", ports={}, bin_dir=Path("/b"))
    assert spec.liveness_url is None and spec.service_account == "default" and spec.argv == ("/b/raftset-operator",)
