"""The headline's scale-in (b) and (c) on real nodes (`make bench --only real`, docs/benchmarks.md).

The loopback rows run members as processes on 127.x addresses. Here everything is what a user
deploys: three real nodes (tools.devcluster.nodes: kubelet, containerd and runc in network
namespaces, CoreDNS, local volumes), OpenKruise's manager, the operator's Deployment and the member
pods from the images built from the project's Dockerfile (the `kruise` overlay, which serves both
backends). Per strategy, a fresh EtcdCluster of five members is made, the leader moved to demo-4,
the scale-in's load started in the first node's namespace (`tests.bench.nodeload`: the same load as
every other row, on the members' DNS names), and only `spec.replicas` is patched:

* **(b)** `workloadKind: StatefulSet`: the StatefulSet deletes demo-4 first, its sidecar's preStop
  hands leadership off and removes its member;
* **(c)** `workloadKind: AdvancedStatefulSet`: the operator reserves demo-2 and demo-3 and keeps the
  leader's pod.

The window ends once the operator's status shows three healthy members with a leader, no step in
progress, and exactly those pods Ready. The clusters run without TLS, as the loopback rows do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raftset import contract
from tests.bench import nodeload, scalein
from tests.bench.load import Observed
from tests.bench.scalein import TAIL_S, Run, scale_in_row
from tests.harness import engines
from tests.harness.waiting import wait_for
from tools.devcluster import nodes, projectimage, realrun

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "bench"
NAME = "demo"
BACKENDS = {scalein.STRATEGIES[1]: "StatefulSet", scalein.OPERATOR_STRATEGY: "AdvancedStatefulSet"}
SIZES = (5, 3)
TIMEOUT_S = 300.0


def url(ordinal: int) -> str:
    return (f"http://{contract.pod_name(NAME, ordinal)}.{contract.peer_service_name(NAME)}.{NAMESPACE}.svc:"
            f"{contract.CLIENT_PORT}")


def settled(cluster: dict[str, Any], ready_pods: set[str], size: int) -> list[int] | None:
    """The kept ordinals once `cluster`'s status shows `size` healthy members with a leader, no step
    in progress, its last spec observed, and exactly those members' pods Ready; else None."""
    st = cluster.get("status") or {}
    members = st.get("members") or []
    names = {m["name"] for m in members}
    conditions = {c["type"]: c.get("status") for c in st.get("conditions", [])}
    if (len(members) != size or not all(m.get("healthy") for m in members) or st.get("leader") not in names
            or st.get("observedGeneration") != cluster["metadata"]["generation"]
            or conditions.get("Progressing") != "False" or ready_pods != names):
        return None
    return sorted(contract.ordinal_of(n) for n in names)


def _observe(run: nodes.Lab, size: int) -> list[int] | None:
    found = run.kubectl("get", "etcdcluster", "-n", NAMESPACE, NAME, "-o", "json", check=False, timeout=20)
    pods = run.kubectl("get", "pods", "-n", NAMESPACE, "-l", contract.label_selector(NAME), "-o", "json",
                       check=False, timeout=20)
    if found.returncode != 0 or pods.returncode != 0:
        return None
    ready = {p["metadata"]["name"] for p in json.loads(pods.stdout)["items"]
             if not p["metadata"].get("deletionTimestamp")
             and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))}
    return settled(json.loads(found.stdout), ready, size)


def _wait(run: nodes.Lab, size: int) -> list[int]:
    try:
        return wait_for(lambda: _observe(run, size), TIMEOUT_S, f"{NAME} settled at {size} members")
    except AssertionError as timeout:
        raise AssertionError(f"{timeout}:\n" + run.kubectl(
            "get", "etcdcluster,pods", "-n", NAMESPACE, "-o", "wide", check=False).stdout) from None


def _wait_for_leader(run: nodes.Lab, pod: str) -> None:
    """Until the operator's status names `pod` leader: what it plans around is what the heartbeats said
    last, and a scale-in planned before they named the moved leader would be measured against the old."""
    def named() -> bool:
        found = run.kubectl("get", "etcdcluster", "-n", NAMESPACE, NAME, "-o", "json", check=False, timeout=20)
        return found.returncode == 0 and (json.loads(found.stdout).get("status") or {}).get("leader") == pod
    wait_for(named, 60, f"the operator's status to name {pod} leader", interval=0.5)


def leader_at(observed: Observed, moment: float, ordinals: dict[int, int]) -> int | None:
    """The ordinal of the leader the load last saw at or before `moment`."""
    seen = [leader for t, leader in observed.leaders if t <= moment and leader]
    return ordinals.get(int(seen[-1], 16)) if seen else None


def run_once(run: nodes.Lab, strategy: str, baseline_s: float) -> Run:
    """One scale-in of a fresh cluster, deleted afterwards with its claims."""
    start, target = SIZES
    build = engines.DEFAULT
    cluster = {"apiVersion": contract.API_VERSION, "kind": contract.KIND_ETCD,
               "metadata": {"name": NAME, "namespace": NAMESPACE},
               "spec": {"replicas": start, "version": build.version, "workloadKind": BACKENDS[strategy],
                        "tls": {"provider": "disabled"}, "storage": {"size": "1Gi"}}}
    run.kubectl("apply", "-f", "-", input=json.dumps(cluster))
    stop_file = run.workdir / f"{strategy}.stop"
    try:
        _wait(run, start)
        args = {"endpoints": [url(o) for o in range(start)], "watch": [url(0), url(1)],
                "leader_to": contract.pod_name(NAME, start - 1), "stop_file": str(stop_file)}
        load = subprocess.Popen(nodes.with_cluster_dns(run, run.plan.nodes[0], [
            sys.executable, "-m", "tests.bench.nodeload", json.dumps(args)]), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            assert load.stdout is not None and load.stderr is not None
            if json.loads(load.stdout.readline() or "{}") != {"warm": True}:
                raise AssertionError(f"the load did not start: {load.stderr.read()[-3000:]}")
            _wait_for_leader(run, contract.pod_name(NAME, start - 1))
            steady_from = time.monotonic()
            time.sleep(baseline_s)
            t0, load_1m = time.monotonic(), os.getloadavg()[0]
            run.kubectl("patch", "etcdcluster", "-n", NAMESPACE, NAME, "--type=merge", "-p",
                        json.dumps({"spec": {"replicas": target}}))
            kept = _wait(run, target)
            done = time.monotonic()
            time.sleep(TAIL_S + 0.5)
            stop_file.touch()
            out, err = load.communicate(timeout=120)
        finally:
            if load.poll() is None:
                load.kill()
                load.wait()
        if load.returncode != 0:
            raise AssertionError(f"the load failed: {err[-3000:]}")
        result = json.loads(out.strip().splitlines()[-1])
        observed = nodeload.observed_from(result["observed"])
        ordinals = {int(m["id"]): contract.ordinal_of(str(m["name"])) for m in result["members"]}
        leaders = (leader_at(observed, t0, ordinals), leader_at(observed, time.monotonic(), ordinals))
        victims = sorted(set(range(start)) - set(kept), reverse=True)
        row = scale_in_row(build, 0, strategy, SIZES, 0, observed, (steady_from, t0, done), victims, leaders,
                           load_1m, NAME)
        return Run(row=row, t0=t0, observed=observed)
    finally:
        run.kubectl("delete", "etcdcluster", "-n", NAMESPACE, NAME, "--wait=true", check=False, timeout=TIMEOUT_S)
        run.kubectl("delete", "pvc", "-n", NAMESPACE, "--all", "--wait=true", check=False, timeout=TIMEOUT_S)


def bench(baseline_s: float, log: Callable[[str], None] = print) -> list[Run]:
    """(b) then (c), on one lab."""
    _, store = projectimage.store_archive()
    with nodes.start(3, log=log) as run:
        realrun.install(run, "kruise", stores=[store], clusters=NAMESPACE, log=log)
        runs = []
        for strategy in BACKENDS:
            runs.append(run_once(run, strategy, baseline_s))
            r = runs[-1].row
            log(f"  real nodes {strategy} {SIZES[0]}->{SIZES[1]}: {r['failed_writes']} failed of {r['writes']} "
                f"({r['failed_write_requests']} failed requests), stall {r['longest_stall_s']:.3f}s, p99 "
                f"{r['write_p99_ms']} ms (steady {r['steady_write_p99_ms']} ms, {r['steady_writes_per_s']}/s), "
                f"leader changes {r['leader_changes']}, victims {r['victims']}, leader {r['leader_before']} -> "
                f"{r['leader_after']}, scale-in {r['scale_in_s']}s")
        return runs
