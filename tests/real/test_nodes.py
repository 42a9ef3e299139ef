"""The real-node lab: one node in its own namespaces becomes Ready, runs a plain pod, and its
teardown leaves nothing on the host (tools.devcluster.nodes)."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.devcluster import lab, labdns, nodes, programs

pytestmark = pytest.mark.real

REPO = Path(__file__).resolve().parents[2]
HOST_IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
# Where kubelet, containerd and the CNI plugins write by default, whatever their configuration.
HOST_STATE = tuple(Path(p) for p in ("/run/containerd", "/var/lib/kubelet", "/var/lib/cni", "/var/lib/containerd",
                                     "/var/log/containers", "/var/log/pods", "/etc/cni", "/opt/cni"))


def _host_state() -> dict[str, list[str]]:
    return {str(p): sorted(os.listdir(p)) if p.is_dir() else [] for p in HOST_STATE if p.exists()}


def _plain_pod(name: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"automountServiceAccountToken": False, "terminationGracePeriodSeconds": 2,
                 "containers": [{"name": "main", "image": programs.PAUSE.image, "imagePullPolicy": "Never",
                                 "command": ["/pause"]}]},
    }


def _pod_running(run: nodes.Lab, name: str) -> dict | None:
    pod = json.loads(run.kubectl("get", "pod", name, "-o", "json").stdout)
    return pod if pod["status"].get("phase") == "Running" else None


def _processes_mentioning(*needles: str) -> list[str]:
    listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in listing.splitlines() if any(n in line for n in needles)]


def _assert_nothing_left(plan: lab.Lab, workdir: Path) -> None:
    assert nodes.leftovers(plan) == []
    assert not workdir.exists()
    assert _processes_mentioning(str(workdir), plan.prefix) == []


def test_one_node_becomes_ready_runs_a_plain_pod_and_leaves_nothing() -> None:
    host_forwarding, host_state = HOST_IP_FORWARD.read_text(), _host_state()
    run = nodes.start(1)
    plan, workdir = run.plan, run.workdir
    try:
        node = plan.nodes[0]
        [registered] = json.loads(run.kubectl("get", "nodes", "-o", "json").stdout)["items"]
        assert registered["metadata"]["name"] == node.name
        assert registered["metadata"]["labels"]["topology.kubernetes.io/zone"] == node.zone
        assert {"type": "InternalIP", "address": node.ip} in registered["status"]["addresses"]
        assert registered["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
        assert nodes.ready_nodes(run) == {node.name}
        # Pod cgroups live under the node's own root (never in another kubelet's way).
        for root in lab.cgroup_paths([Path("/sys/fs/cgroup") / h for h in ("cpu", "memory", "pids")], node.cgroup_root):
            assert (root / "kubepods").is_dir(), root

        run.kubectl("apply", "-f", "-", input=json.dumps(_plain_pod("plain")))
        deadline = time.monotonic() + 120
        while (pod := _pod_running(run, "plain")) is None and time.monotonic() < deadline:
            time.sleep(1)
        assert pod is not None, run.kubectl("describe", "pod", "plain").stdout
        assert pod["spec"]["nodeName"] == node.name
        assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(node.pod_cidr)
        assert "localhost/pause:3.10" in run.ctr(node, "images", "list", "-q")
        # The apiserver reaches the kubelet (at the node IP) for a container's log.
        logs = run.kubectl("logs", "-n", "kube-system", "deployment/coredns", check=False)
        assert logs.returncode == 0 and "CoreDNS-1.12.3" in logs.stdout, logs.stderr
        assert HOST_IP_FORWARD.read_text() == host_forwarding
        assert _host_state() == host_state
        # containerd's shim sockets (fixed path) are in the node's own /run.
        shim_sockets = os.listdir(run.dirs(node).private("/run") / "containerd" / "s")
        assert len(shim_sockets) >= 2, shim_sockets  # CoreDNS's pod and the plain pod: a shim each
    finally:
        problems = run.stop()
    assert problems == []
    _assert_nothing_left(plan, workdir)
    assert HOST_IP_FORWARD.read_text() == host_forwarding
    assert _host_state() == host_state


def _cli_lab(sig: signal.Signals) -> tuple[str, Path, int, str]:
    """`python -m tools.devcluster nodes --count 1` until its lab is up, then `sig`: the run id,
    the workdir, the exit status and the output."""
    proc = subprocess.Popen([sys.executable, "-m", "tools.devcluster", "nodes", "--count", "1"], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("Ctrl-C"):
                break
        assert "Ctrl-C" in "".join(lines), "".join(lines)
        up = next(line for line in lines if line.startswith("lab "))
        run_id, workdir = up.split()[1], Path(up.rsplit("workdir ", 1)[1].strip())
        assert workdir.is_dir() and (lab.NETNS_DIR / f"rs{run_id}-n1").exists()
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return run_id, workdir, proc.returncode, "".join(lines) + rest


def test_a_stop_signal_tears_the_lab_down() -> None:
    run_id, workdir, status, output = _cli_lab(signal.SIGTERM)
    assert status == 0, output
    assert "stopped: every process, namespace, cgroup and file of the lab removed" in output
    _assert_nothing_left(lab.plan(run_id, 0), workdir)  # names depend on the run id only


def test_a_run_whose_owner_was_killed_is_swept() -> None:
    run_id, workdir, status, output = _cli_lab(signal.SIGKILL)
    assert status == -signal.SIGKILL, output
    plan = lab.plan(run_id, 0)  # names depend on the run id only
    # The supervised processes died with their owner; the rest stayed behind.
    assert nodes.leftovers(plan) and workdir.is_dir()
    assert nodes.sweep(workdir.parent) == {run_id: []}
    _assert_nothing_left(plan, workdir)


CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 9), timeout=5)
except ConnectionRefusedError:
    print("refused")  # the pod's own kernel answered: the packet got there and back
except OSError as exc:
    print(type(exc).__name__, exc)
"""


def _echo_workload() -> list[dict]:
    """Two echo pods, one per node, behind a headless Service (their DNS names) and a ClusterIP one."""
    labels = {"app": "echo"}
    return [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo", "namespace": "default"},
         "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": labels,
                  "ports": [{"name": "echo", "port": 8080}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo-any", "namespace": "default"},
         "spec": {"selector": labels, "ports": [{"name": "echo", "port": 80, "targetPort": 8080}]}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "echo", "namespace": "default"},
         "spec": {"serviceName": "echo", "replicas": 2, "podManagementPolicy": "Parallel",
                  "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 2,
                      "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                          {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}]}},
                      "containers": [{"name": "echo", "image": programs.ECHO.image, "imagePullPolicy": "Never",
                                      "ports": [{"containerPort": 8080}]}]}}}},
    ]


READ = """
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as conn:
    print(conn.recv(100).decode().strip())
"""


def _read_from(node: lab.Node, host: str, port: int) -> str:
    answer = subprocess.run(lab.in_netns(node, [sys.executable, "-c", READ, host, str(port)]),
                            capture_output=True, text=True, timeout=30)
    assert answer.returncode == 0, answer.stderr
    return answer.stdout.strip()


def _host_ruleset() -> str:
    return subprocess.run(["nft", "list", "ruleset"], capture_output=True, text=True).stdout


def test_two_nodes_route_pod_traffic_and_serve_cluster_dns_through_their_own_service_rules() -> None:
    host_rules = _host_ruleset()
    run = nodes.start(2)
    plan, workdir = run.plan, run.workdir
    try:
        assert nodes.ready_nodes(run) == {"node1", "node2"}
        pods = []
        for node in plan.nodes:
            pod = _plain_pod(f"on-{node.name}")
            pod["spec"]["nodeName"] = node.name
            run.kubectl("apply", "-f", "-", input=json.dumps(pod))
            pods.append(pod["metadata"]["name"])
        deadline = time.monotonic() + 120
        running: dict[str, dict | None] = {name: None for name in pods}
        while not all(running.values()) and time.monotonic() < deadline:
            running = {name: _pod_running(run, name) for name in pods}
            time.sleep(1)
        assert all(running.values()), run.kubectl("get", "pods", "-o", "wide").stdout
        ips = [running[name]["status"]["podIP"] for name in pods]  # type: ignore[index]
        for node, remote_ip in ((plan.nodes[0], ips[1]), (plan.nodes[1], ips[0])):
            answer = subprocess.run(lab.in_netns(node, [sys.executable, "-c", CONNECT, remote_ip]),
                                    capture_output=True, text=True, timeout=30)
            assert answer.stdout.strip() == "refused", (node.name, remote_ip, answer.stdout, answer.stderr)
        assert all(nodes.service_rules(node) for node in plan.nodes)
        # CoreDNS answers from its Deployment behind kube-dns, reached through each node's
        # kube-proxy rules; its answer comes from the API, which it reached through the
        # `kubernetes` Service's IP (in-cluster config).
        for node in plan.nodes:
            assert nodes.resolve(run, node, "kubernetes.default.svc.cluster.local") == (0, [plan.first_service_ip])
            assert nodes.resolve(run, node, "nothing.default.svc.cluster.local") == (3, [])  # NXDOMAIN

        # A StatefulSet's pods by their DNS names under a headless Service, and a ClusterIP
        # Service balancing over both nodes' pods, from each node.
        run.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": _echo_workload()}))
        run.kubectl("rollout", "status", "statefulset/echo", "--timeout=120s", timeout=130)
        echo_pods = {name: json.loads(run.kubectl("get", "pod", name, "-o", "json").stdout) for name in ("echo-0", "echo-1")}
        assert {p["spec"]["nodeName"] for p in echo_pods.values()} == {"node1", "node2"}
        service_ip = run.kubectl("get", "service", "echo-any", "-o", "jsonpath={.spec.clusterIP}").stdout
        for node in plan.nodes:
            for name, pod in echo_pods.items():
                dns_name = f"{name}.echo.default.svc.cluster.local"
                assert nodes.resolve(run, node, dns_name) == (0, [pod["status"]["podIP"]])
                # The reverse lookup etcd 3.6's peer checkSAN makes of a connecting peer's IP: one
                # name per Service that selects the pod (here also `<ip-dashed>.echo-any...`).
                reverse = labdns.reverse_name(pod["status"]["podIP"])
                rcode, names = nodes.resolve(run, node, reverse, labdns.PTR)
                assert rcode == 0 and dns_name in names, names
                assert _read_from(node, pod["status"]["podIP"], 8080) == name
            answers = {_read_from(node, service_ip, 80) for _ in range(30)}
            assert answers == {"echo-0", "echo-1"}, (node.name, answers)  # each missed: 2**-30
        assert _host_ruleset() == host_rules
    finally:
        problems = run.stop()
    assert problems == []
    _assert_nothing_left(plan, workdir)


def test_a_claim_without_a_class_gets_a_local_volume_on_its_pods_node_where_fs_group_applies() -> None:
    run = nodes.start(2, dns=False)
    plan, workdir = run.plan, run.workdir
    try:
        claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "default"},
                 "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
        pod = _plain_pod("member")
        pod["spec"]["securityContext"] = {"runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532}
        pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
        run.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [claim, pod]}))
        deadline = time.monotonic() + 120
        while (running := _pod_running(run, "member")) is None and time.monotonic() < deadline:
            time.sleep(1)
        assert running is not None, run.kubectl("describe", "pod,pvc").stdout
        bound = json.loads(run.kubectl("get", "pvc", "data", "-o", "json").stdout)
        assert bound["spec"]["storageClassName"] == "lab-local" and bound["status"]["phase"] == "Bound"
        volume = json.loads(run.kubectl("get", "pv", bound["spec"]["volumeName"], "-o", "json").stdout)
        directory = Path(volume["spec"]["local"]["path"])
        node = running["spec"]["nodeName"]
        assert directory.parent == run.volume_dirs()[node]
        # kubelet gave the volume to the pod's fsGroup (setgid, group-writable): hostPath would not.
        mode = directory.stat()
        assert mode.st_gid == 65532 and mode.st_mode & 0o2070 == 0o2070, oct(mode.st_mode)

        run.kubectl("delete", "pod", "member", "--wait=true", timeout=120)
        run.kubectl("delete", "pvc", "data", "--wait=true", timeout=120)
        deadline = time.monotonic() + 60
        while directory.exists() and time.monotonic() < deadline:
            time.sleep(1)
        assert not directory.exists()
        assert run.kubectl("get", "pv", "-o", "name").stdout.strip() == ""
    finally:
        problems = run.stop()
    assert problems == []
    _assert_nothing_left(plan, workdir)


def test_two_labs_side_by_side_do_not_collide() -> None:
    first = nodes.start(1, dns=False)
    try:
        second = nodes.start(1, dns=False)
        try:
            assert first.plan.run_id != second.plan.run_id
            assert not set(first.plan.netns_names) & set(second.plan.netns_names)
            for run in (first, second):
                run.kubectl("apply", "-f", "-", input=json.dumps(_plain_pod("plain")))
            for run in (first, second):
                deadline = time.monotonic() + 120
                while _pod_running(run, "plain") is None and time.monotonic() < deadline:
                    time.sleep(1)
                assert _pod_running(run, "plain") is not None, run.kubectl("describe", "pod", "plain").stdout
                assert nodes.ready_nodes(run) == {"node1"}  # each plane sees its own node only
        finally:
            second_plan, second_workdir, second_problems = second.plan, second.workdir, second.stop()
        assert second_problems == []
        _assert_nothing_left(second_plan, second_workdir)
        # The first lab is untouched by the second's teardown.
        assert nodes.ready_nodes(first) == {"node1"} and _pod_running(first, "plain") is not None
    finally:
        first_plan, first_workdir, first_problems = first.plan, first.workdir, first.stop()
    assert first_problems == []
    _assert_nothing_left(first_plan, first_workdir)
