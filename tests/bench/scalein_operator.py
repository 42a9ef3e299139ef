"""Scale-in strategy (c) through the product: the operator process and the real Advanced StatefulSet.

The other strategies (`scalein`) run their members in a bare kube-apiserver and drive each
step themselves. Here nothing is driven: on the full local control plane (kube-apiserver,
kube-controller-manager, kwok, the real OpenKruise controller) the real operator runs as a
process, and the pod runner (`tools.devcluster.podrunner`) plays kubelet for the cluster's
pods with real etcd members and real sidecars. The bench creates an `EtcdCluster` with the
AdvancedStatefulSet backend, the product's defaults (etcd's own raft timings, the sidecar's
and the operator's default intervals), moves the leader to the highest ordinal, starts the
same load as every other strategy, and then only patches the cluster's `spec.replicas`.
The operator plans from the sidecars' heartbeats, writes `replicas` and `reserveOrdinals`,
Kruise deletes the chosen follower's pod, the runner terminates it the kubelet way (preStop
GET /leave, then SIGTERM); the window ends once the operator's status shows the target size
and Raft has exactly the target voters.

Every member's peer port sits behind the same real Toxiproxy as in `scalein` (the runner's
`peer_listen` hook puts each member behind its proxy before it starts), so the latency
toxic means the same here.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from raftset import contract
from tests.bench.load import Load
from tests.bench.scalein import JITTER, OPERATOR_STRATEGY, TAIL_S, Run, scale_in_row
from tests.harness import engines
from tests.harness.operator import Operator, kubectl, product_intervals, running_operator, wait_for
from tests.harness.toxiproxy import Toxiproxy, peer_listen
from tests.harness.view import ClusterView
from tools.devcluster.podrunner import RUN_NAMESPACE_PREFIX, PodRunner, pod_ip

STRATEGY = OPERATOR_STRATEGY
BACKEND = "AdvancedStatefulSet"
NAME = "demo"  # the cluster's name: its pods are demo-N, as in the other strategies' rows
GROW_TIMEOUT_S = 300.0  # 5 real members joining one by one, on a shared 2-core box
SCALE_TIMEOUT_S = 300.0


def settled_at(view: ClusterView, size: int) -> list[int] | None:
    """The kept ordinals once the operator's status shows `size` healthy members with a leader,
    no step in progress, and Raft has exactly those members as started voters; else None."""
    obj = view.obj()
    st = obj.get("status") or {}
    members = st.get("members") or []
    names = {m["name"] for m in members}
    conditions = {c["type"]: c.get("status") for c in st.get("conditions", [])}
    if (len(members) != size or not all(m.get("healthy") for m in members) or st.get("leader") not in names
            or st.get("observedGeneration") != obj["metadata"]["generation"] or conditions.get("Progressing") != "False"
            or view.pods() != names):
        return None
    ordinals = sorted(contract.ordinal_of(n) for n in names)
    raft = view.members(*ordinals)
    voting = {m.name for m in raft if m.started and not m.is_learner}
    return ordinals if voting == {m.name for m in raft} == names else None


def _wait_settled(view: ClusterView, size: int, timeout: float) -> list[int]:
    def check() -> list[int] | None:
        try:
            return settled_at(view, size)
        except AssertionError:  # no member answered MemberList yet
            return None
    return wait_for(check, timeout, f"{view.name}: status and Raft at {size} voters", interval=0.2)


def run_once(kubeconfig: str, operator: Operator, workdir: Path, start: int, target: int, repetition: int,
             baseline_s: float, one_way_ms: int = 0) -> Run:
    """One scale-in of a fresh cluster in a namespace of its own, removed afterwards."""
    build = engines.DEFAULT
    namespace = f"{RUN_NAMESPACE_PREFIX}bench-c-{uuid.uuid4().hex[:6]}"
    kubectl(kubeconfig, "create", "namespace", namespace)
    try:
        with Toxiproxy(workdir / "toxiproxy") as toxiproxy, PodRunner(
                kubeconfig, workdir / "runner", namespace=namespace,
                peer_listen=peer_listen(toxiproxy, one_way_ms, round(one_way_ms * JITTER))) as runner:
            view = ClusterView(kubeconfig, contract.KIND_ETCD, NAME, namespace, BACKEND, member_url=lambda o: (
                f"http://{pod_ip(runner.addresses.prefix(namespace, NAME), o)}:{contract.CLIENT_PORT}"))
            view.create(start, version=build.version)
            _wait_settled(view, start, GROW_TIMEOUT_S)
            top = start - 1
            view.move_leader(top, *range(start))  # the ordinal the builtin StatefulSet deletes first
            leader_before = view.leader(*range(start))
            load = Load([view.url(o) for o in range(start)], watch=[view.url(0), view.url(1)])
            load.start()
            try:
                load.wait_writes(20)
                steady_from = time.monotonic()
                time.sleep(baseline_s)
                t0 = time.monotonic()
                load_1m = os.getloadavg()[0]
                view.custom.patch_namespaced_custom_object(  # the only thing the bench changes
                    contract.GROUP, contract.VERSION, namespace, view.plural, NAME, {"spec": {"replicas": target}})
                survivors = _wait_settled(view, target, SCALE_TIMEOUT_S)
                done = time.monotonic()
                time.sleep(TAIL_S + 0.5)
            finally:
                observed = load.stop()
            if not operator.alive():
                raise AssertionError(f"the operator exited: see {operator.log}")
            leader_after = view.leader(*survivors)
            victims = sorted(set(range(start)) - set(survivors), reverse=True)
            row = scale_in_row(build, one_way_ms, STRATEGY, (start, target), repetition, observed,
                               (steady_from, t0, done), victims, (leader_before, leader_after), load_1m, NAME)
            return Run(row=row, t0=t0, observed=observed)
    finally:
        # The runner has stopped the members and released its finalizers: the namespace goes at
        # once, and the next run (or the operator-cost benchmark) starts on a clean plane.
        kubectl(kubeconfig, "delete", "namespace", namespace, "--timeout=50s", check=False)


def bench(kubeconfig: str, workdir: Path, sizes: Sequence[tuple[int, int]], repetitions: int, baseline_s: float,
          log: Callable[[str], None] = print, latencies_ms: Sequence[int] = (0,)) -> list[Run]:
    """Every latency, size and repetition, under one operator process for all of them."""
    runs: list[Run] = []
    workdir.mkdir(parents=True, exist_ok=True)
    with running_operator(kubeconfig, workdir / "operator.log", BACKEND, **product_intervals()) as operator:
        for one_way_ms in latencies_ms:
            for start, target in sizes:
                for repetition in range(repetitions):
                    t = time.monotonic()
                    run_dir = workdir / f"{one_way_ms}ms-{start}to{target}-{repetition}"
                    run = run_once(kubeconfig, operator, run_dir, start, target, repetition, baseline_s, one_way_ms)
                    runs.append(run)
                    shutil.rmtree(run_dir, ignore_errors=True)  # a failed run's logs stay for a look
                    r = run.row
                    log(f"  row {json.dumps(r)}")
                    log(f"  scale-in {one_way_ms} ms {STRATEGY} {start}->{target} #{repetition}: "
                        f"{r['failed_writes']} failed of {r['writes']} ({r['failed_write_requests']} failed "
                        f"requests), stall {r['longest_stall_s']:.3f}s, p99 {r['write_p99_ms']} ms, p99.9 "
                        f"{r['write_p999_ms']} ms (steady p99 {r['steady_write_p99_ms']} ms, p99.9 "
                        f"{r['steady_write_p999_ms']} ms, {r['steady_writes_per_s']}/s), leader changes "
                        f"{r['leader_changes']}, victims {r['victims']}, scale-in {r['scale_in_s']}s "
                        f"({time.monotonic() - t:.0f}s)")
    return runs
