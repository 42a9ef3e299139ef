"""The kwok stages of the dev plane: pods a pod runner runs are left unready, others made Ready."""

from __future__ import annotations

import pytest
import yaml

from tools.devcluster import plane

pytestmark = pytest.mark.unit

# kwok's fast pod-ready stage (v0.7), cut to what `unready` rewrites, as its YAML file has it.
FAST_STAGE = """
spec:
  next:
    statusTemplate: |
      {{ $now := Now }}

      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: ContainersReady
      {{ range .spec.readinessGates }}
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: {{ .conditionType | Quote }}
      {{ end }}

      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
"""
FAST_TEMPLATE = yaml.safe_load(FAST_STAGE)["spec"]["next"]["statusTemplate"]


def stage(template: str) -> dict:
    return {"metadata": {"name": "pod-ready"},
            "spec": {"selector": {"matchExpressions": []}, "next": {"statusTemplate": template}}}


def test_the_runners_pods_run_unready_and_initialized() -> None:
    run = plane.unready(stage(FAST_TEMPLATE))
    template = run["spec"]["next"]["statusTemplate"]
    rendered = template.split("{{ range .spec.readinessGates")[0].replace("{{ $now := Now }}", "")
    conditions = {c["type"]: c["status"] for c in yaml.safe_load(rendered.replace("{{ $now | Quote }}", "now"))["conditions"]}
    assert conditions == {"Initialized": "True", "Ready": "False", "ContainersReady": "False"}
    assert "ready: false" in template and "ready: true" not in template
    assert run["metadata"]["name"] == "pod-running-unready"


def test_a_changed_kwok_template_is_refused_not_silently_kept_ready() -> None:
    with pytest.raises(ValueError, match="template changed"):
        plane.unready(stage(FAST_TEMPLATE.replace("type: ContainersReady", "type: Whatever")))



@pytest.mark.parametrize("pods, nodes, scale", [(0, 3, 1), (440, 4, 1), (441, 4, 2), (1256, 4, 3), (5256, 4, 12)])
def test_fake_nodes_hold_every_pod_asked_for(pods: int, nodes: int, scale: int) -> None:
    assert plane.node_scale(pods, nodes) == scale
    capacity = plane.fake_node("n", scale)["status"]["allocatable"]
    # A member pod requests 270m CPU and 576Mi (the store's default and the sidecar's): every one fits.
    by_cpu = int(capacity["cpu"]) * 1000 // 270
    by_memory = int(capacity["memory"].removesuffix("Gi")) * 1024 // 576
    assert nodes * min(int(capacity["pods"]), by_cpu, by_memory) >= pods
