"""Operator cost on the local control plane: RSS and CPU at rest, spec-change latency.

The real operator runs as a subprocess (`tests.harness.operator.Operator`) with its
default intervals (a reconcile timer every 5 s per cluster, a full re-apply every 600 s)
against the full local plane (controller-manager, scheduler, OpenKruise, kwok). Clusters
are one-member EtcdClusters on the builtin StatefulSet, so their kwok pods fit the fake
nodes; each has a heartbeat Lease renewed every 10 s (the sidecar's default) by a
stand-in thread, so the operator sees what it would see in a live cluster at rest.

At rest: after the clusters are created and settled, CPU over a quiet interval (psutil
cpu_times of the operator process) and its RSS. Latency: one cluster at a time, a label
is added to `spec.podTemplate.labels` and the StatefulSet's `metadata.generation` is
polled until it moves.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from raftset import contract
from tests.bench.stats import percentile
from tests.harness.operator import ROOT, Operator, api, heartbeat_lease, kubectl, product_intervals

COLUMNS = ("clusters", "settled", "create_s", "rss_mib", "cpu_rest_pct", "spec_changes", "spec_changes_timed_out",
           "spec_to_patch_p50_ms", "spec_to_patch_p95_ms", "spec_to_patch_max_ms")
STALL_S = 120.0  # give up waiting for the clusters to settle after this long without progress
HEARTBEAT_S = 10.0  # the sidecar's default RAFTSET_HEARTBEAT_INTERVAL; Lease duration 3x
POLL_S = 0.02
SPEC_CHANGE_TIMEOUT_S = 30.0  # a change not in the workload by then is counted at this (a lower bound)
MAX_TIMEOUTS = 3


class Heartbeats(threading.Thread):
    """One heartbeat Lease per cluster (its one pod, leading), renewed every HEARTBEAT_S."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        super().__init__(daemon=True, name="bench-heartbeats")
        self.leases = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.clusters: list[str] = []
        self._done = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + 3600
        while not self._done.is_set() and time.monotonic() < deadline:
            started = time.monotonic()
            clusters = list(self.clusters)
            for i, name in enumerate(clusters):
                if self._done.is_set():
                    return
                self._renew(name)
                # Spread the renewals over the interval, as independent sidecars would.
                self._done.wait(max(0.0, started + (i + 1) * HEARTBEAT_S / len(clusters) - time.monotonic()))
            if not clusters:
                self._done.wait(0.5)

    def write_now(self, names: Sequence[str]) -> None:
        for name in names:
            self._renew(name)

    def _renew(self, cluster: str) -> None:
        pod = contract.pod_name(cluster, 0)
        body = heartbeat_lease(self.namespace, cluster, pod, role=contract.ROLE_LEADER,
                               member_id=f"{abs(hash(cluster)) & 0xFFFFFFFF:x}",
                               lease_seconds=int(3 * HEARTBEAT_S))
        # Server-side apply, as the sidecar writes it: the apiserver refuses a Lease update (PUT)
        # without a resourceVersion (422), which left every cluster leaderless and Degraded.
        try:
            self.leases.patch_namespaced_lease(
                body["metadata"]["name"], self.namespace, body, field_manager="raftset-sidecar", force=True,
                _content_type="application/apply-patch+yaml")
        except ApiException:
            return  # a busy apiserver: the next round renews it

    def stop(self) -> None:
        self._done.set()
        self.join(30)


def _cluster(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": contract.API_VERSION, "kind": "EtcdCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1, "workloadKind": "StatefulSet", "storage": {"ephemeral": True},
                 "tls": {"provider": "disabled"}},
    }


def _create(kubeconfig: str, namespace: str, names: Sequence[str]) -> None:
    for i in range(0, len(names), 50):
        docs = [_cluster(n, namespace) for n in names[i:i + 50]]
        kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))


def _settled(custom: client.CustomObjectsApi, apps: client.AppsV1Api, namespace: str) -> set[str]:
    """Clusters with their StatefulSet and a status for their current generation."""
    workloads = {w.metadata.name for w in apps.list_namespaced_stateful_set(namespace).items}
    clusters = custom.list_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters")
    return {c["metadata"]["name"] for c in clusters["items"]
            if c["metadata"]["name"] in workloads
            and (c.get("status") or {}).get("observedGeneration") == c["metadata"]["generation"]}


def _wait_settled(custom: client.CustomObjectsApi, apps: client.AppsV1Api, namespace: str, names: Sequence[str],
                  log: Callable[[str], None]) -> tuple[set[str], float]:
    """Wait until every cluster settled, or STALL_S passed without one more settling.

    Returns the settled clusters and when (monotonic) the last of them settled.
    """
    t0 = last_progress = last_log = time.monotonic()
    settled: set[str] = set()
    while True:
        now_settled = _settled(custom, apps, namespace)
        now = time.monotonic()
        if len(now_settled) > len(settled):
            last_progress = now
        settled = now_settled
        if settled >= set(names):
            return settled, now
        if now - last_progress > STALL_S:
            missing = sorted(set(names) - settled)
            sample = custom.get_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace,
                                                         "etcdclusters", missing[0])
            log(f"  operator: {len(missing)} of {len(names)} clusters not settled after {now - t0:.0f}s, "
                f"none for {STALL_S:.0f}s; e.g. {missing[0]}: status={sample.get('status')}")
            return settled, last_progress
        if now - last_log > 30:
            log(f"  operator: {len(settled)} of {len(names)} clusters settled after {now - t0:.0f}s")
            last_log = now
        time.sleep(1.0)


def _spec_change_latency(custom: client.CustomObjectsApi, apps: client.AppsV1Api, namespace: str,
                         name: str, mark: str, timeout: float = SPEC_CHANGE_TIMEOUT_S) -> float | None:
    """Seconds from the spec change until the StatefulSet moved; None when it did not within `timeout`."""
    before = apps.read_namespaced_stateful_set(name, namespace).metadata.generation
    custom.patch_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters", name,
                                          {"spec": {"podTemplate": {"labels": {"bench-change": mark}}}})
    t0 = time.monotonic()
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        if apps.read_namespaced_stateful_set(name, namespace).metadata.generation != before:
            return time.monotonic() - t0
        time.sleep(POLL_S)
    return None


def _spec_changes(measure: Callable[[str, str], float | None], names: Sequence[str], count: int
                  ) -> tuple[list[float], int]:
    """Latencies in ms, a change that timed out counted at the timeout (a lower bound), and how many
    timed out; after MAX_TIMEOUTS the rest are not tried: the operator is past keeping up."""
    latencies, timed_out = [], 0
    for i, name in enumerate(names):
        seconds = measure(name, f"{count}-{i}")
        if seconds is None:
            timed_out += 1
            latencies.append(SPEC_CHANGE_TIMEOUT_S * 1000)
            if timed_out >= MAX_TIMEOUTS:
                break
        else:
            latencies.append(seconds * 1000)
    return latencies, timed_out


def _cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def bench(kubeconfig: str, workdir: Path, counts: Sequence[int], spec_changes: int, rest_s: float,
          log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    workdir.mkdir(parents=True, exist_ok=True)
    kubectl(kubeconfig, "apply", "--server-side", "-k", str(ROOT / "crds"))
    for plural in ("etcdclusters", "xlineclusters"):
        kubectl(kubeconfig, "wait", "--for=condition=Established", f"crd/{plural}.{contract.GROUP}",
                "--timeout=60s")
    namespace = f"bench-op-{uuid.uuid4().hex[:6]}"
    kubectl(kubeconfig, "create", "namespace", namespace)
    api_client = api(kubeconfig)
    custom, apps = client.CustomObjectsApi(api_client), client.AppsV1Api(api_client)
    operator = Operator(kubeconfig, workdir / "operator.log", **product_intervals())
    heartbeats = Heartbeats(api_client, namespace)
    rows: list[dict[str, Any]] = []
    rng = random.Random(7)
    try:
        operator.start()
        assert operator.process is not None
        proc = psutil.Process(operator.process.pid)
        heartbeats.start()
        names: list[str] = []
        for count in sorted(counts):
            new = [f"c{i:04d}" for i in range(len(names), count)]
            heartbeats.write_now(new)
            t0 = time.monotonic()
            _create(kubeconfig, namespace, new)
            names += new
            heartbeats.clusters = list(names)
            settled, settled_at = _wait_settled(custom, apps, namespace, names, log)
            created = settled_at - t0
            time.sleep(min(10.0, rest_s))  # let the creation's tail (Events, status) pass
            cpu0, t_rest = _cpu_seconds(proc), time.monotonic()
            time.sleep(rest_s)
            cpu = (_cpu_seconds(proc) - cpu0) / (time.monotonic() - t_rest) * 100
            rss = proc.memory_info().rss / 2**20
            # Only settled clusters have a StatefulSet whose generation can move.
            chosen = rng.sample(sorted(settled), min(spec_changes, len(settled)))
            latencies, timed_out = _spec_changes(
                lambda name, mark: _spec_change_latency(custom, apps, namespace, name, mark), chosen, count)
            rows.append({
                "clusters": count, "settled": len(settled), "create_s": round(created, 1), "rss_mib": round(rss, 1),
                "cpu_rest_pct": round(cpu, 1), "spec_changes": len(latencies), "spec_changes_timed_out": timed_out,
                "spec_to_patch_p50_ms": round(percentile(latencies, 50), 1),
                "spec_to_patch_p95_ms": round(percentile(latencies, 95), 1),
                "spec_to_patch_max_ms": round(max(latencies, default=0.0), 1),
            })
            log(f"  operator with {count} clusters: {len(settled)} settled in {created:.0f}s, RSS {rss:.0f} MiB, "
                f"CPU at rest {cpu:.1f}% of a core, spec->patch p50 {percentile(latencies, 50):.0f} ms "
                f"p95 {percentile(latencies, 95):.0f} ms ({timed_out} past {SPEC_CHANGE_TIMEOUT_S:.0f} s)")
            if not operator.alive():
                raise AssertionError(f"the operator exited: see {operator.log}")
    finally:
        heartbeats.stop()
        operator.stop()
        kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=false", check=False)
    return rows
