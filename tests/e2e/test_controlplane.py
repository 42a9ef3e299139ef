"""The full local plane does what the operator relies on: workload controllers, kwok pods,
OpenKruise's Advanced StatefulSet and its webhooks, the garbage collector."""

from __future__ import annotations

import base64
import ipaddress
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml

from tools.devcluster import Plane
from tools.devcluster.procs import wait_for

pytestmark = pytest.mark.e2e

TIMEOUT_S = 120  # generous: kwok makes pods Ready in about a second


@pytest.fixture
def ns(control_plane: Plane) -> Iterator[str]:
    name = f"cp-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


def statefulset(name: str, replicas: int, api_version: str = "apps/v1", **spec: object) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": api_version,
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                # kwok never pulls or runs the image; the name only has to be valid.
                "spec": {"containers": [{"name": "main", "image": "registry.invalid/pause:1"}]},
            },
            **spec,
        },
    }


def create(plane: Plane, ns: str, obj: dict, check: bool = True):
    return plane.kubectl("create", "-n", ns, "-f", "-", input=yaml.safe_dump(obj), check=check)


def pods(plane: Plane, ns: str, app: str) -> list[dict]:
    return json.loads(plane.kubectl("get", "pods", "-n", ns, "-l", f"app={app}", "-o", "json").stdout)["items"]


def ready_pod_names(plane: Plane, ns: str, app: str) -> set[str]:
    """Names of the pods that are Running and Ready and not being deleted."""
    return {
        p["metadata"]["name"]
        for p in pods(plane, ns, app)
        if p["status"].get("phase") == "Running"
        and "deletionTimestamp" not in p["metadata"]
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
    }


def wait_for_pods(plane: Plane, ns: str, app: str, expected: set[str]) -> None:
    """Until exactly `expected` exist, all Running+Ready (and none other, not even terminating)."""
    wait_for(
        lambda: ready_pod_names(plane, ns, app) == expected and {p["metadata"]["name"] for p in pods(plane, ns, app)} == expected,
        f"pods {sorted(expected)} of {app} Running+Ready", TIMEOUT_S,
    )


def test_builtin_statefulset_runs_on_kwok_and_scales_in_from_the_top(control_plane: Plane, ns: str) -> None:
    create(control_plane, ns, statefulset("web", 3))
    wait_for_pods(control_plane, ns, "web", {"web-0", "web-1", "web-2"})
    for pod in pods(control_plane, ns, "web"):
        assert pod["spec"]["nodeName"].startswith("kwok-node-"), "the real scheduler placed it on a fake node"
        assert ipaddress.ip_address(pod["status"]["podIP"]).is_loopback, "pod IPs must never leave the machine"

    control_plane.kubectl("scale", "statefulset/web", "-n", ns, "--replicas=2")
    wait_for_pods(control_plane, ns, "web", {"web-0", "web-1"})


def test_advanced_statefulset_skips_reserved_ordinals(control_plane: Plane, ns: str) -> None:
    create(control_plane, ns, statefulset("adv", 2, "apps.kruise.io/v1beta1", reserveOrdinals=[1]))
    wait_for_pods(control_plane, ns, "adv", {"adv-0", "adv-2"})


def test_advanced_statefulset_scale_in_deletes_a_reserved_ordinal(control_plane: Plane, ns: str) -> None:
    """The operator's leader-keeping scale-in: 3 -> 2 with ordinal 1 reserved keeps -0 and -2."""
    create(control_plane, ns, statefulset("keep", 3, "apps.kruise.io/v1beta1"))
    wait_for_pods(control_plane, ns, "keep", {"keep-0", "keep-1", "keep-2"})
    patch = {"spec": {"replicas": 2, "reserveOrdinals": [1]}}
    control_plane.kubectl("patch", "statefulsets.apps.kruise.io/keep", "-n", ns, "--type=merge", "-p", json.dumps(patch))
    wait_for_pods(control_plane, ns, "keep", {"keep-0", "keep-2"})


def test_kruise_defaulting_webhook_fills_the_spec(control_plane: Plane, ns: str) -> None:
    """Kruise's CRDs carry no schema defaults: these values can only come from its mutating webhook."""
    create(control_plane, ns, statefulset("defaults", 0, "apps.kruise.io/v1beta1"))
    obj = json.loads(control_plane.kubectl("get", "statefulsets.apps.kruise.io/defaults", "-n", ns, "-o", "json").stdout)
    rolling = obj["spec"]["updateStrategy"]["rollingUpdate"]
    assert rolling["podUpdatePolicy"] == "ReCreate"
    assert rolling["partition"] == 0
    assert obj["spec"]["podManagementPolicy"] == "OrderedReady"
    assert obj["spec"]["revisionHistoryLimit"] == 10


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"reserveOrdinals": [-1]}, "reserve ordinal is negative"),
        ({"selector": {"matchLabels": {"app": "other"}}}, "does not match template"),
    ],
)
def test_kruise_validating_webhook_refuses_invalid_specs(control_plane: Plane, ns: str, change: dict, message: str) -> None:
    obj = statefulset("bad", 1, "apps.kruise.io/v1beta1")
    obj["spec"].update(change)
    result = create(control_plane, ns, obj, check=False)
    assert result.returncode != 0
    assert "admission webhook" in result.stderr and message in result.stderr, result.stderr
    assert control_plane.kubectl("get", "statefulsets.apps.kruise.io/bad", "-n", ns, check=False).returncode != 0


def test_deleting_an_owner_garbage_collects_its_children(control_plane: Plane, ns: str) -> None:
    create(control_plane, ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}})
    uid = json.loads(control_plane.kubectl("get", "configmap/owner", "-n", ns, "-o", "json").stdout)["metadata"]["uid"]
    owner_ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}
    for i in range(2):
        create(control_plane, ns, {"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": f"child-{i}", "ownerReferences": [owner_ref]}})
    bystander = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bystander"}}
    create(control_plane, ns, bystander)

    control_plane.kubectl("delete", "configmap/owner", "-n", ns, "--cascade=background")

    def children_gone() -> bool:
        names = control_plane.kubectl("get", "configmaps", "-n", ns, "-o", "name").stdout.split()
        return not any(n.startswith("configmap/child-") for n in names)

    wait_for(children_gone, "garbage collection of the owner's children", TIMEOUT_S)
    assert control_plane.kubectl("get", "configmap/bystander", "-n", ns, check=False).returncode == 0


def test_token_controller_fills_service_account_token_secrets(control_plane: Plane, ns: str, tmp_path: Path) -> None:
    control_plane.kubectl("create", "serviceaccount", "robot", "-n", ns)
    create(control_plane, ns, {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "robot-token", "annotations": {"kubernetes.io/service-account.name": "robot"}},
    })

    def token() -> str:
        secret = json.loads(control_plane.kubectl("get", "secret/robot-token", "-n", ns, "-o", "json").stdout)
        return base64.b64decode(secret.get("data", {}).get("token", "")).decode()

    as_robot = control_plane.kubeconfig_for_token(wait_for(token, "the token controller to fill the Secret", TIMEOUT_S),
                                                  tmp_path / "robot.kubeconfig")
    whoami = json.loads(control_plane.kubectl("auth", "whoami", "-o", "json", as_kubeconfig=as_robot).stdout)
    assert whoami["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:robot"


def test_every_plane_process_listens_on_loopback_only(control_plane: Plane) -> None:
    listeners = {
        (proc.name, conn.laddr.ip, conn.laddr.port)
        for proc in control_plane.supervisor.procs
        for conn in psutil.Process(proc.pid).net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    }
    assert {name for name, _, _ in listeners} >= {"etcd", "kube-apiserver", "kruise-manager", "kwok"}
    assert all(ipaddress.ip_address(ip).is_loopback for _, ip, _ in listeners), sorted(listeners)
