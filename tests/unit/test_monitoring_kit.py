"""The optional monitoring component: it renders on top of an overlay (real `kubectl kustomize`), it
scrapes the ports the operator renders, and its alerts and dashboard name only metrics the code exports.

(promtool checks and unit-tests the rules in tests/etcd/test_monitoring_rules.py.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest

from raftset import contract
from raftset.operator.components.services import metrics_service
from raftset.operator.metrics import OperatorMetrics
from raftset.sidecar.metrics import Metrics
from tests.unit.builders import cluster
from tests.unit.test_metrics import STATE, STATUS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "kustomize" / "components" / "monitoring"


def render_with_component(tmp_path: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with its built-in kustomize) is required for these tests"
    overlay = ROOT / "kustomize" / "overlays" / "statefulset"
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(overlay, tmp_path)],
        "components": [os.path.relpath(COMPONENT, tmp_path)],
    }))
    done = subprocess.run([kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def test_the_component_renders_on_an_overlay_and_scrapes_what_the_operator_serves(tmp_path: Path) -> None:
    docs = render_with_component(tmp_path)
    members = one(docs, "ServiceMonitor", "raftset-members")
    operator_monitor = one(docs, "PodMonitor", "raftset-operator")
    one(docs, "PrometheusRule", "raftset")
    dashboard = one(docs, "ConfigMap", "raftset-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["raftset.json"])["uid"] == "raftset"
    # The members' ServiceMonitor selects the metrics Service the operator renders, by its port names.
    service = metrics_service(cluster())
    selector = members["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in members["spec"]["endpoints"]} == set(ports)
    assert ports == {"metrics": contract.METRICS_PORT, "sidecar": contract.SIDECAR_PORT}
    # The operator's PodMonitor finds the Deployment's pods and its metrics port.
    deployment = one(docs, "Deployment", "raftset-operator")
    template = deployment["spec"]["template"]
    assert operator_monitor["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    container_ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
    assert {e["port"] for e in operator_monitor["spec"]["podMetricsEndpoints"]} <= container_ports
    env = {e["name"]: e.get("value") for c in template["spec"]["containers"] for e in c.get("env", [])}
    assert env["RAFTSET_METRICS_ADDRESS"].endswith(":8081")


def exported_names() -> set[str]:
    sidecar = Metrics()
    sidecar.watch(lambda: STATE)
    for step in ("join", "leave", "hash_check"):
        sidecar.outcome(step, "x")
    operator = OperatorMetrics()
    operator.clusters.observe(("ns", "demo"), "EtcdCluster", STATUS)
    operator.reconciles.labels("EtcdCluster", "ok").inc()
    operator.duration.labels("EtcdCluster").observe(1)
    operator.scale_steps.labels("EtcdCluster", "scale-in").inc()
    operator.refusals.labels("EtcdCluster", "ScaleRefused").inc()
    operator.leader_changes.labels("ns", "demo", "EtcdCluster").inc()
    text = (generate_latest(sidecar.registry) + generate_latest(operator.registry)).decode()
    return set(re.findall(r"^(raftset_\w+)", text, re.M))


def test_alerts_and_dashboard_name_only_exported_metrics() -> None:
    exported = exported_names()
    used = set(re.findall(r"\b(raftset_[a-z_]*[a-z])\b", (COMPONENT / "prometheusrule.yaml").read_text()
                          + (COMPONENT / "dashboard.json").read_text()))
    assert used, "no metric found in the rules or the dashboard"
    assert used <= exported, f"not exported by the sidecar or the operator: {sorted(used - exported)}"
