"""`make run NODES=real` (tools.devcluster.realrun): three real nodes, the operator from the image built from
the Dockerfile, the demo EtcdCluster on real pods; every line of its guide works as printed (etcdctl inside a
member's container, through the members' DNS names), and a stop signal leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raftset import contract
from tools.devcluster import lab, nodes

pytestmark = pytest.mark.real

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 900.0  # the lab, and the project's image when its sources changed (about 70 s)
READY_TIMEOUT_S = 300.0


def _guide_lines(output: str) -> tuple[str, list[str]]:
    """The kubeconfig and the guide's kubectl lines, as printed."""
    lines = [line.strip() for line in output.splitlines()]
    kubeconfig = next(line.split("=", 1)[1] for line in lines if line.startswith("export KUBECONFIG="))
    return kubeconfig, [line for line in lines if line.startswith("kubectl ")]


def _sh(line: str, kubeconfig: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KUBECONFIG": kubeconfig}, cwd=REPO)


def _ready(kubeconfig: str, count: int) -> bool:
    found = _sh("kubectl get etcdc demo -o json", kubeconfig)
    status = json.loads(found.stdout).get("status", {}) if found.returncode == 0 else {}
    pods = _sh(f"kubectl get pods -l {contract.label_selector('demo')} -o json", kubeconfig)
    ready = {p["metadata"]["name"] for p in json.loads(pods.stdout)["items"]
             if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))}
    return status.get("readyReplicas") == count and ready == {f"demo-{o}" for o in range(count)}


def _wait(what: str, probe, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(2)
    raise AssertionError(f"no {what} after {timeout:.0f} s")


def test_make_run_on_real_nodes_serves_its_guide_and_stops_leaving_nothing() -> None:
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "tools.devcluster", "run", "--nodes", "real"], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        for line in proc.stdout:
            lines.append(line)
            if "Ctrl-C stops everything" in line or time.monotonic() > deadline:
                break
        output = "".join(lines)
        assert "Ctrl-C stops everything" in output, output[-5000:]
        up = next(line for line in lines if line.startswith("lab "))
        run_id, workdir = up.split()[1], Path(up.rsplit("workdir ", 1)[1].strip())
        kubeconfig, commands = _guide_lines(output)
        guided = time.monotonic() - started
        _wait("three Ready members of demo", lambda: _ready(kubeconfig, 3), READY_TIMEOUT_S)
        print(f"make run NODES=real: guide after {guided:.1f} s; demo Ready after {time.monotonic() - started:.1f} s")
        results = {}
        for line in commands:
            result = _sh(line, kubeconfig)
            assert result.returncode == 0, f"{line}\n{result.stdout}{result.stderr}"
            results[line.split("#")[0].strip()] = result.stdout
            if "--replicas=5" in line:
                _wait("five Ready members", lambda: _ready(kubeconfig, 5), READY_TIMEOUT_S)
            elif "--replicas=3" in line:
                _wait("three Ready members again", lambda: _ready(kubeconfig, 3), READY_TIMEOUT_S)
        zones = next(out for line, out in results.items() if line.startswith("kubectl get nodes"))
        assert all(f"zone-{z}" in zones for z in "abc"), zones
        status = next(out for line, out in results.items() if "endpoint status" in line)
        assert sum("demo-" in row and ".svc:2379" in row for row in status.splitlines()) == 3, status
        assert "true" in status.lower(), status  # IS LEADER for one of them
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, rest[-3000:]
    assert "stopped: every process, namespace, cgroup and file of the lab removed" in rest, rest[-3000:]
    plan = lab.plan(run_id, 0)  # names depend on the run id only
    assert nodes.leftovers(plan) == [] and not workdir.exists()
