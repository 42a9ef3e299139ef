"""Scale-in availability: the same scale-in driven three ways, under a writer and a reader.

Every run builds a fresh cluster of real etcd members with their real sidecars
(`tests.harness.lab.Lab`), places the leader on the highest ordinal (the one the builtin
StatefulSet deletes first), starts the load, and scales in:

  a. builtin StatefulSet, no hand-off: a plain etcd StatefulSet (the sidecars are killed
     before the window, so nothing of ours takes part). Each victim gets what kubelet gives
     a pod without a useful preStop: SIGTERM to etcd, SIGKILL after the grace period.
     Then the bench removes the member with MemberRemove through a surviving member as
     soon as the pod is gone: an administrator's best case. (etcd itself hands leadership
     to a peer when it stops on SIGTERM, so this is not a leader crash.)
  b. builtin StatefulSet with our sidecar: the workload's replicas are lowered, then each
     victim (highest ordinal first) is terminated the kubelet way (`Pod.terminate()`:
     preStop /leave hands leadership off and removes the member, then SIGTERM).
  c. Advanced StatefulSet with the operator's planner: the planner reads the heartbeat
     Leases the sidecars wrote, chooses a follower, the bench writes replicas and
     reserveOrdinals to the Kruise workload object as the operator would, then the victim
     pod is terminated the same kubelet way.
  r. reference: as (a), but the store is SIGKILLed (the end of an expired grace period, an
     OOM kill, a lost node): what a scale-in costs when nobody hands leadership off.

(c) through the product, the operator process and the real Advanced StatefulSet controller
with the bench only lowering `spec.replicas`, is `scalein_operator`: it needs the full
control plane, not this module's bare kube-apiserver.

Every member's peer port sits behind a real Toxiproxy (`tests.harness.toxiproxy`) in every
run, so the latencies compared differ by the latency toxic only: 0 ms is the proxy alone,
2 ms and 20 ms one-way emulate members in neighbouring and in far zones.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from raftset import contract
from raftset.sidecar.io.etcdclient import EtcdClientError, MemberClient, Refusal
from raftset.operator.pure.scale_step import parse_step
from raftset.operator.pure import planner
from raftset.operator.pure.heartbeats import from_leases
from raftset.workloads import ADVANCED_STATEFULSET
from tests.bench.labs import engine_defaults, grow
from tests.bench.load import Load, Observed
from tests.bench.stats import Sample, leader_changes, leaders_in_window, started_in, window_stats
from tests.harness.engines import DEFAULT, EngineUnderTest
from tests.harness.lab import Lab, wait_for
from tests.harness.toxiproxy import Toxiproxy, route_peers

STRATEGIES = ("a-builtin-no-handoff", "b-builtin-sidecar-handoff", "c-advanced-planner", "r-builtin-sigkill")
# (c) through the product: the operator and the real Advanced StatefulSet controller on the full
# control plane (`scalein_operator`), not a driver of this module's bare kube-apiserver.
OPERATOR_STRATEGY = "c-operator-advanced"
REPORTED = (*STRATEGIES[:3], OPERATOR_STRATEGY, STRATEGIES[3])  # the order of tables and plots
KUBELET_GRACE_S = 30.0  # terminationGracePeriodSeconds of a plain etcd StatefulSet (Kubernetes default)
TAIL_S = 1.0  # the window ends this long after the scale-in is complete, so a late stall is seen
JITTER = 0.1  # jitter of the latency toxic, as a share of the one-way latency
KRUISE = ("apps.kruise.io", "v1beta1", "statefulsets")

COLUMNS = (
    "one_way_ms", "strategy", "from_members", "to_members", "repetition", "steady_writes_per_s",
    "steady_write_p50_ms", "steady_write_p99_ms", "steady_write_p999_ms", "writes", "failed_writes",
    "failed_write_requests", "longest_stall_s", "write_p50_ms", "write_p99_ms", "write_p999_ms", "reads",
    "failed_reads", "failed_read_requests", "longest_read_stall_s", "leader_changes",
    "scale_in_s", "victims", "leader_before", "leader_after", "load_1m", "first_error",
    "write_errors",
)


@dataclass
class Run:
    """One measured scale-in; `row` is what the results files keep."""

    row: dict[str, Any]
    t0: float
    observed: Observed


def install_kruise_crd(kubeconfig: str, crd_file: Path) -> None:
    """The Advanced StatefulSet API (OpenKruise's own CRD) in a bare apiserver: the object only."""
    api = k8s.ApiextensionsV1Api(_api(kubeconfig))
    body = yaml.safe_load(crd_file.read_text())
    try:
        api.create_custom_resource_definition(body)
    except ApiException as exc:
        if exc.status != 409:
            raise

    def established() -> bool:
        crd = api.read_custom_resource_definition(body["metadata"]["name"])
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])
    wait_for(established, 30, "Kruise StatefulSet CRD established")


def _api(kubeconfig: str) -> k8s.ApiClient:
    return k8s_config.new_client_from_config(config_file=kubeconfig)


def _kruise_statefulset(lab: Lab, replicas: int) -> dict[str, Any]:
    body = lab._statefulset(replicas)  # the same object, in the Advanced StatefulSet API
    body["apiVersion"] = "apps.kruise.io/v1beta1"
    body["spec"]["reserveOrdinals"] = []
    return body


def _leases_show(lab: Lab, size: int, leader: int) -> bool:
    now = datetime.now(timezone.utc)
    members = [m for m in from_leases(_lease_dicts(lab)) if m.fresh(now)]
    roles = {m.ordinal: m.role for m in members}
    return len(roles) == size and roles.get(leader) == contract.ROLE_LEADER and all(m.healthy for m in members)


def _lease_dicts(lab: Lab) -> list[dict[str, Any]]:
    serialise = lab.coordination.api_client.sanitize_for_serialization
    return [serialise(lease) for lease in lab.leases().values()]


async def member_ids(lab: Lab, ordinals: Sequence[int]) -> dict[int, int]:
    return {int(m.name.rsplit("-", 1)[1]): m.id for m in await lab.members(*ordinals) if m.name}


async def _leader(lab: Lab, ordinals: Sequence[int]) -> int | None:
    try:
        return await lab.leader_ordinal(*ordinals)
    except EtcdClientError:
        return None


# --- the three ways to scale in ---

def _stop_like_kubelet_without_prestop(lab: Lab, ordinal: int, sig: int = signal.SIGTERM) -> None:
    pod = lab.pod(ordinal)
    lab.delete_pod(ordinal)
    assert pod.store is not None
    pod.store.send_signal(sig)
    try:
        pod.store.wait(KUBELET_GRACE_S)
    except subprocess.TimeoutExpired:
        pod.store.kill()
        pod.store.wait(5)
    lab.release_pod(ordinal)


async def _remove_member(lab: Lab, member_id: int, survivors: Sequence[int]) -> None:
    """MemberRemove through a survivor; etcd refuses for a moment after a voter (re)connected."""
    deadline = time.monotonic() + 30
    while True:
        try:
            async with MemberClient(lab.pod(survivors[0]).client_url, timeout=5) as c:
                await c.remove(member_id)
            return
        except EtcdClientError as exc:
            if exc.refusal is Refusal.MEMBER_NOT_FOUND:
                return
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def scale_in_builtin_no_handoff(lab: Lab, start: int, target: int,
                                      sig: int = signal.SIGTERM) -> list[int]:
    victims = list(range(start - 1, target - 1, -1))
    ids = await member_ids(lab, range(start))
    lab.scale(target)
    for ordinal in victims:
        _stop_like_kubelet_without_prestop(lab, ordinal, sig)
        await _remove_member(lab, ids[ordinal], range(target))
    return victims


async def scale_in_builtin_sigkill(lab: Lab, start: int, target: int) -> list[int]:
    return await scale_in_builtin_no_handoff(lab, start, target, signal.SIGKILL)


async def scale_in_builtin_sidecar(lab: Lab, start: int, target: int) -> list[int]:
    victims = list(range(start - 1, target - 1, -1))
    lab.scale(target)
    for ordinal in victims:
        result = lab.pod(ordinal).terminate()
        assert result and result.get("removed"), f"demo-{ordinal} did not leave: {result}"
    return victims


async def scale_in_advanced_planner(lab: Lab, start: int, target: int) -> list[int]:
    custom = k8s.CustomObjectsApi(lab.apps.api_client)
    backend = ADVANCED_STATEFULSET
    victims: list[int] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        workload = custom.get_namespaced_custom_object(*KRUISE[:2], lab.namespace, KRUISE[2], lab.cluster)
        current = (int(workload["spec"]["replicas"]), backend.reserved(workload))
        members = from_leases(_lease_dicts(lab))
        pending = parse_step((workload["metadata"].get("annotations") or {}).get(contract.ANNOTATION_SCALE_STEP))
        step = planner.plan(lab.cluster, backend, target, current, members, lab.membership(),
                            datetime.now(timezone.utc), pending=pending)
        if step.action == "steady":
            return victims
        if step.action != "scale-in":
            await asyncio.sleep(0.1)  # "wait": the previous victim's Lease is still there, etc.
            continue
        # What the operator writes, then what Kruise does: delete the pod of the reserved ordinal.
        custom.patch_namespaced_custom_object(*KRUISE[:2], lab.namespace, KRUISE[2], lab.cluster,
                                              {"metadata": {"annotations": {
                                                  contract.ANNOTATION_SCALE_STEP: step.record.to_json()
                                                  if step.record else None}},
                                               "spec": backend.scale_spec(step.replicas, step.reserved)})
        (victim,) = sorted(set(backend.kept(workload)) - set(step.kept))
        lab.annotate_pod(victim, {contract.ANNOTATION_SCALE_AWAY: "true"})
        result = lab.pod(victim).terminate()
        assert result and result.get("removed"), f"demo-{victim} did not leave: {result}"
        victims.append(victim)
    raise AssertionError(f"planner scale-in {start}->{target} did not finish: {victims}")


DRIVERS: dict[str, Callable[[Lab, int, int], Any]] = {
    STRATEGIES[0]: scale_in_builtin_no_handoff,
    STRATEGIES[1]: scale_in_builtin_sidecar,
    STRATEGIES[2]: scale_in_advanced_planner,
    STRATEGIES[3]: scale_in_builtin_sigkill,
}


async def run_once(kubeconfig: str, workdir: Path, strategy: str, start: int, target: int,
                   repetition: int, baseline_s: float, one_way_ms: int = 0, build: EngineUnderTest = DEFAULT) -> Run:
    advanced = strategy == STRATEGIES[2]
    env = {**engine_defaults(build), **({"RAFTSET_WORKLOAD_KIND": "AdvancedStatefulSet"} if advanced else {})}
    lab = Lab(kubeconfig, workdir, replicas=start, env_extra=env, engine=build)
    try:
        with Toxiproxy(workdir / "toxiproxy") as toxiproxy:
            route_peers(lab, toxiproxy, range(start), one_way_ms, round(one_way_ms * JITTER))
            if advanced:
                k8s.CustomObjectsApi(lab.apps.api_client).create_namespaced_custom_object(
                    *KRUISE[:2], lab.namespace, KRUISE[2], _kruise_statefulset(lab, start))
            await grow(lab, start)
            top = start - 1
            await lab.move_leader_to(top, timeout=30)
            if advanced:
                wait_for(lambda: _leases_show(lab, start, top), 30, f"Leases showing demo-{top} leading")
            if strategy in (STRATEGIES[0], STRATEGIES[3]):
                for ordinal in range(start):  # a plain etcd StatefulSet: none of our processes
                    pod = lab.pod(ordinal)
                    assert pod.sidecar is not None
                    pod.sidecar.kill()
                    pod.sidecar.wait(5)
            leader_before = await _leader(lab, range(start))
            endpoints = [lab.pod(o).client_url for o in range(start)]
            load = Load(endpoints, watch=[lab.pod(0).client_url, lab.pod(1).client_url])
            load.start()
            try:
                load.wait_writes(20)
                steady_from = time.monotonic()
                await asyncio.sleep(baseline_s)
                t0 = time.monotonic()
                load_1m = os.getloadavg()[0]
                victims = await DRIVERS[strategy](lab, start, target)
                survivors = sorted(set(range(start)) - set(victims))
                await lab.wait_voting(target, 60, *survivors)
                done = time.monotonic()
                await asyncio.sleep(TAIL_S + 0.5)
            finally:
                observed = load.stop()
            leader_after = await _leader(lab, survivors)
            row = scale_in_row(build, one_way_ms, strategy, (start, target), repetition, observed,
                               (steady_from, t0, done), victims, (leader_before, leader_after), load_1m, "demo")
            return Run(row=row, t0=t0, observed=observed)
    finally:
        lab.close()
        shutil.rmtree(workdir, ignore_errors=True)


def scale_in_row(build: EngineUnderTest, one_way_ms: int, strategy: str, sizes: tuple[int, int], repetition: int,
                 observed: Observed, times: tuple[float, float, float], victims: Sequence[int],
                 leaders: tuple[int | None, int | None], load_1m: float, name: str) -> dict[str, Any]:
    """One scale-in's row, whoever drove it: `times` are (steady from, scale-in began, done)."""
    steady_from, t0, done = times

    def pod(ordinal: int | None) -> str:
        return f"{name}-{ordinal}" if ordinal is not None else ""

    return {
        "engine": build.label, "one_way_ms": one_way_ms, "strategy": strategy, "from_members": sizes[0],
        "to_members": sizes[1], "repetition": repetition,
        **window_row(observed, (steady_from, t0), (t0, done + TAIL_S)),
        "scale_in_s": round(done - t0, 3),
        "victims": " ".join(pod(v) for v in victims),
        "leader_before": pod(leaders[0]), "leader_after": pod(leaders[1]),
        "load_1m": round(load_1m, 2),  # the machine is shared: how busy it was during this run
        # What a failed request was told: the reason behind a stall, in the results.
        "first_error": observed.errors[0][:160] if observed.errors else "",
        "write_errors": error_kinds(observed.errors, "put"),
    }


def window_row(observed: Observed, steady: tuple[float, float], window: tuple[float, float]) -> dict[str, Any]:
    """What the load saw in `window` against its `steady` stretch before: the columns every
    disruption under this load reports (a scale-in, an upgrade's roll)."""
    before = window_stats(observed.writes, steady)
    stats = window_stats(observed.writes, window)
    reads = window_stats(observed.reads, window)
    return {
        "steady_writes_per_s": round(before.per_s, 1),
        "steady_write_p50_ms": round(before.p50_ms, 2), "steady_write_p99_ms": round(before.p99_ms, 2),
        "steady_write_p999_ms": round(before.p999_ms, 2),
        "writes": stats.writes, "failed_writes": stats.failed_writes,
        "failed_write_requests": started_in(observed.failed_write_requests, window),
        "longest_stall_s": round(stats.longest_stall_s, 3),
        "write_p50_ms": round(stats.p50_ms, 2), "write_p99_ms": round(stats.p99_ms, 2),
        "write_p999_ms": round(stats.p999_ms, 2),
        "reads": reads.writes, "failed_reads": reads.failed_writes,
        "failed_read_requests": started_in(observed.failed_read_requests, window),
        "longest_read_stall_s": round(reads.longest_stall_s, 3),
        "leader_changes": leader_changes(leaders_in_window(observed.leaders, window)),
    }


def error_kinds(errors: Sequence[str], request: str) -> str:
    """How often each reason failed a `request` ("put"/"get"), the member's address left out: "5x leader changed"."""
    counts: dict[str, int] = {}
    for error in errors:
        kind, _, text = error.partition(": ")
        if kind == request:
            reason = text.split(": ", 1)[-1][:80]  # "Put at http://...: reason"
            counts[reason] = counts.get(reason, 0) + 1
    return "; ".join(f"{n}x {reason}" for reason, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def timeline(run: Run, before_s: float = 1.0, samples: Sequence[Sample] | None = None) -> list[Sample]:
    """The run's writes (or other `samples`) relative to the start of the scale-in, from `before_s` before it."""
    return [Sample(s.start - run.t0, s.end - run.t0, s.ok) for s in
            (run.observed.writes if samples is None else samples) if s.start >= run.t0 - before_s]


async def bench(kubeconfig: str, workdir: Path, sizes: Sequence[tuple[int, int]], repetitions: int,
                baseline_s: float, strategies: Sequence[str] = STRATEGIES,
                log: Callable[[str], None] = print, latencies_ms: Sequence[int] = (0,),
                build: EngineUnderTest = DEFAULT) -> list[Run]:
    """Every latency x size x repetition x strategy; strategies interleave so machine noise hits all alike."""
    runs: list[Run] = []
    for one_way_ms in latencies_ms:
        for start, target in sizes:
            for repetition in range(repetitions):
                for strategy in strategies:
                    t = time.monotonic()
                    run = await run_once(
                        kubeconfig, workdir / f"{build.label}-{strategy}-{one_way_ms}ms-{start}to{target}-{repetition}",
                        strategy, start, target, repetition, baseline_s, one_way_ms, build)
                    runs.append(run)
                    r = run.row
                    log(f"  row {json.dumps(r)}")  # a long run that fails later still leaves its rows
                    log(f"  scale-in {build.label} {one_way_ms} ms {strategy} {start}->{target} #{repetition}: "
                        f"{r['failed_writes']} failed of {r['writes']} ({r['failed_write_requests']} failed "
                        f"requests), stall {r['longest_stall_s']:.3f}s, "
                        f"p99 {r['write_p99_ms']} ms (steady {r['steady_write_p99_ms']} ms, "
                        f"{r['steady_writes_per_s']}/s), leader changes {r['leader_changes']}, "
                        f"victims {r['victims']} ({time.monotonic() - t:.0f}s)")
    return runs
