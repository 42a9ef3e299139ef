"""The real operator on real nodes: an EtcdCluster with TLS `auto` from the operator's own CA,
members on three nodes reaching each other by their DNS names (etcd's peer checkSAN does forward
and reverse lookups of them, etcd-io/etcd-operator#434), serving with the certificates the
operator issued, and an external writer's acknowledged writes all read back. Not in `make test` yet."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raftset import contract, engines
from tools.devcluster import nodes, projectimage

pytestmark = pytest.mark.real

REPO = Path(__file__).resolve().parents[2]
OPERATOR_IMAGE = "ghcr.io/raftset/raftset:0.1.0"  # the Deployment's and the sidecar's default
NAMESPACE = "db"
NAME = "tls"
READY_TIMEOUT_S = 240.0


def _cluster(replicas: int) -> dict:
    return {
        "apiVersion": contract.API_VERSION, "kind": "EtcdCluster",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {"replicas": replicas, "version": engines.ETCD.default_version, "tls": {"provider": "auto"},
                 "storage": {"size": "1Gi"}},
    }


def _ready_pods(run: nodes.Lab) -> dict[str, str]:
    """Ready member pods: name -> node."""
    pods = json.loads(run.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods
            if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))}


def _wait(what: str, probe, timeout: float, explain) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := probe():
            return value
        time.sleep(2)
    raise AssertionError(f"no {what} after {timeout:.0f} s:\n{explain()}")


def _explain(run: nodes.Lab) -> str:
    parts = [run.kubectl("get", "pods,pvc,etcdclusters", "-n", NAMESPACE, "-o", "wide", check=False).stdout,
             run.kubectl("get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp", check=False).stdout[-4000:]]
    for ordinal in range(3):
        parts.append(run.kubectl("logs", "-n", NAMESPACE, contract.pod_name(NAME, ordinal), "-c", "etcd",
                                 "--tail=15", check=False).stdout[-3000:])
    operator = run.kubectl("logs", "-n", "raftset-system", "deployment/raftset-operator", "--tail=300",
                           check=False).stdout.splitlines()
    parts += [line for line in operator if "aiohttp.access" not in line][-30:]
    return "\n".join(parts)


def _client_tls_dir(run: nodes.Lab) -> Path:
    secret = json.loads(run.kubectl("get", "secret", "-n", NAMESPACE, f"{NAME}-client-tls", "-o", "json").stdout)
    out = run.workdir / "client-tls"
    out.mkdir(exist_ok=True)
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (out / key).write_bytes(base64.b64decode(secret["data"][key]))
    return out


def _write_and_check(run: nodes.Lab, endpoints: list[str], seconds: float) -> dict:
    args = {"endpoints": endpoints, "tls_dir": str(_client_tls_dir(run)), "seconds": seconds}
    argv = nodes.with_cluster_dns(run, run.plan.nodes[0], [sys.executable, "-m", "tests.real.nodewriter",
                                                             json.dumps(args)])
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=seconds + 120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _member_url(ordinal: int, port: int) -> str:
    return f"https://{contract.pod_name(NAME, ordinal)}.{contract.peer_service_name(NAME)}.{NAMESPACE}.svc:{port}"


def test_the_real_operator_runs_a_tls_cluster_on_dns_names_with_its_own_certificates() -> None:
    operator_image, operator_archive = projectimage.ensure_archive()
    _, store_archive = projectimage.store_archive()
    with nodes.start(3) as run:
        nodes.import_archive(run, operator_archive)
        nodes.import_archive(run, store_archive)
        for node in run.plan.nodes:
            run.ctr(node, "images", "tag", "--force", operator_image, OPERATOR_IMAGE)
        run.kubectl("apply", "--server-side", "-k", str(REPO / "kustomize/overlays/statefulset"), timeout=120)
        run.kubectl("scale", "-n", "raftset-system", "deployment/raftset-operator", "--replicas=1")
        run.kubectl("rollout", "status", "-n", "raftset-system", "deployment/raftset-operator", "--timeout=180s",
                    timeout=190)
        run.kubectl("create", "namespace", NAMESPACE)
        # TLS `auto` keeps its CA in Secrets of the cluster's namespace: the install's documented grant.
        run.kubectl("create", "rolebinding", "raftset-operator-secrets", "-n", NAMESPACE,
                    "--clusterrole=raftset-operator-secrets", "--serviceaccount=raftset-system:raftset-operator")
        run.kubectl("apply", "-f", "-", input=json.dumps(_cluster(3)))

        started = time.monotonic()
        placed = _wait("three Ready members", lambda: (p := _ready_pods(run)) and len(p) == 3 and p,
                       READY_TIMEOUT_S, lambda: _explain(run))
        assert len(set(placed.values())) == 3, placed  # one per node (zone)
        print(f"three members Ready {time.monotonic() - started:.1f} s after the EtcdCluster was applied")

        result = _write_and_check(run, [_member_url(o, 2379) for o in range(3)], seconds=10)
        assert "verdict_error" not in result, result
        assert result["ok"] > 0 and result["verdict"]["acknowledged"] == result["ok"], result
        # The members know each other by their DNS names, not by addresses.
        peers = sorted(url for m in result["members"] for url in m["peer_urls"])
        assert peers == [_member_url(o, 2380) for o in range(3)], result["members"]
