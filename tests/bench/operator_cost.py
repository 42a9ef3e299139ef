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
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from raftset import contract
from tests.bench.stats import percentile
from tests.harness.operator import ROOT, Operator, api, heartbeat_lease, kubectl, product_intervals

COLUMNS = ("version", "clusters", "settled", "create_s", "resume_s", "rss_mib", "cpu_rest_pct", "spec_changes",
           "spec_changes_timed_out", "spec_to_patch_p50_ms", "spec_to_patch_p95_ms", "spec_to_patch_max_ms",
           "churn_per_s", "churn_changes", "churn_timed_out", "cpu_churn_pct", "churn_p50_ms", "churn_p95_ms")
VERSION, BASELINE = "this", "baseline"  # the checkout measured, and the other one (--operator-baseline)
STALL_S = 120.0  # give up waiting for the clusters to settle after this long without progress
HEARTBEAT_S = 10.0  # the sidecar's default RAFTSET_HEARTBEAT_INTERVAL; Lease duration 3x
POLL_S = 0.02
SPEC_CHANGE_TIMEOUT_S = 30.0  # a change not in the workload by then is counted at this (a lower bound)
MAX_TIMEOUTS = 3
RESUME_S = 300.0
HANDLED = f"{contract.GROUP}/last-handled-configuration"  # kopf's diffbase (raftset.operator.handlers.configure)


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
    """Clusters with their StatefulSet, a status for their current generation, and kopf's record that
    its create handler is done (a round other than that handler's may have written the rest first)."""
    workloads = {w.metadata.name for w in apps.list_namespaced_stateful_set(namespace).items}
    clusters = custom.list_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters")
    return {c["metadata"]["name"] for c in clusters["items"]
            if c["metadata"]["name"] in workloads
            and (c.get("status") or {}).get("observedGeneration") == c["metadata"]["generation"]
            and HANDLED in (c["metadata"].get("annotations") or {})}


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


def _spec_changes(measure: Callable[[str, str], float | None], names: Sequence[str], tag: str
                  ) -> tuple[list[float], int]:
    """Latencies in ms, a change that timed out counted at the timeout (a lower bound), and how many
    timed out; after MAX_TIMEOUTS the rest are not tried: the operator is past keeping up."""
    latencies, timed_out = [], 0
    for i, name in enumerate(names):
        seconds = measure(name, f"{tag}-{i}")
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


def _churn(custom: client.CustomObjectsApi, apps: client.AppsV1Api, namespace: str, names: Sequence[str],
           rate: float, seconds: float, proc: psutil.Process, tag: str) -> dict[str, Any]:
    """`rate` spec changes a second for `seconds`, each on a cluster of its own (`names`, in order): the
    operator's CPU over that time, and each change's latency to its StatefulSet (seen by one watch)."""
    sent: dict[str, tuple[float, int]] = {}  # cluster -> (when changed, its StatefulSet's generation before)
    latencies: list[float] = []
    lock = threading.Lock()
    listed = apps.list_namespaced_stateful_set(namespace)
    generation = {w.metadata.name: w.metadata.generation for w in listed.items}
    stream = watch.Watch()
    done = threading.Event()

    def seen(name: str, moved_to: int) -> None:
        with lock:
            change = sent.get(name)
            if change is not None and moved_to > change[1]:
                latencies.append((time.monotonic() - change[0]) * 1000)
                del sent[name]

    def follow() -> None:
        version = listed.metadata.resource_version
        while not done.is_set():
            try:
                for event in stream.stream(apps.list_namespaced_stateful_set, namespace, resource_version=version,
                                           timeout_seconds=int(seconds + SPEC_CHANGE_TIMEOUT_S + 30)):
                    seen(event["object"].metadata.name, event["object"].metadata.generation)
                    version = event["object"].metadata.resource_version
            except Exception:  # noqa: BLE001 - the stream broke (a timeout, a 410): list, then watch again
                again = apps.list_namespaced_stateful_set(namespace)
                for workload in again.items:
                    seen(workload.metadata.name, workload.metadata.generation)
                version = again.metadata.resource_version

    follower = threading.Thread(target=follow, daemon=True, name="bench-churn-watch")
    follower.start()
    chosen = list(names)[:int(rate * seconds)]
    cpu0 = _cpu_seconds(proc)
    t0 = time.monotonic()
    for i, name in enumerate(chosen):
        time.sleep(max(0.0, t0 + i / rate - time.monotonic()))
        with lock:
            sent[name] = (time.monotonic(), generation.get(name, 0))
        custom.patch_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters", name,
                                              {"spec": {"podTemplate": {"labels": {"bench-churn": tag}}}})
    cpu = (_cpu_seconds(proc) - cpu0) / (time.monotonic() - t0) * 100
    deadline = time.monotonic() + SPEC_CHANGE_TIMEOUT_S
    while time.monotonic() < deadline:
        with lock:
            if not sent:
                break
        time.sleep(0.2)
    done.set()
    stream.stop()
    with lock:
        timed_out = len(sent)
        measured = latencies + [SPEC_CHANGE_TIMEOUT_S * 1000] * timed_out
    return {"churn_per_s": rate, "churn_changes": len(chosen), "churn_timed_out": timed_out,
            "cpu_churn_pct": round(cpu, 1), "churn_p50_ms": round(percentile(measured, 50), 1),
            "churn_p95_ms": round(percentile(measured, 95), 1)}


def _resumed(operator: Operator, count: int, log: Callable[[str], None]) -> float:
    """Seconds until a just-started operator ran a reconcile per cluster (its resume rounds), at most RESUME_S."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < RESUME_S:
        try:
            if operator.all_reconciles() >= count:
                break
        except OSError:
            pass  # its metrics are not served yet
        time.sleep(1.0)
    else:
        log(f"  operator: fewer than {count} reconciles {RESUME_S:.0f}s after its start")
    return time.monotonic() - t0


def bench(kubeconfig: str, workdir: Path, counts: Sequence[int], spec_changes: int, rest_s: float,
          log: Callable[[str], None] = print, *, baseline: Path | None = None, churn_per_s: float = 10.0,
          churn_s: float = 30.0) -> list[dict[str, Any]]:
    """A row per size (and per version: `baseline`, another checkout, is measured on the same clusters
    after this one, each operator alone; the one that did not create them resumed them)."""
    workdir.mkdir(parents=True, exist_ok=True)
    kubectl(kubeconfig, "apply", "--server-side", "-k", str(ROOT / "crds"))
    for plural in ("etcdclusters", "xlineclusters"):
        kubectl(kubeconfig, "wait", "--for=condition=Established", f"crd/{plural}.{contract.GROUP}",
                "--timeout=60s")
    namespace = f"bench-op-{uuid.uuid4().hex[:6]}"
    kubectl(kubeconfig, "create", "namespace", namespace)
    api_client = api(kubeconfig)
    custom, apps = client.CustomObjectsApi(api_client), client.AppsV1Api(api_client)
    versions: list[tuple[str, Path | None]] = [(VERSION, None)] + ([(BASELINE, baseline)] if baseline else [])
    heartbeats = Heartbeats(api_client, namespace)
    rows: list[dict[str, Any]] = []
    rng = random.Random(7)
    operator: Operator | None = None
    try:
        heartbeats.start()
        names: list[str] = []
        for count in sorted(counts):
            new = [f"c{i:04d}" for i in range(len(names), count)]
            for turn, (version, source) in enumerate(versions):
                if operator is None or operator.source != source:
                    if operator is not None:
                        operator.stop()
                    operator = Operator(kubeconfig, workdir / f"operator-{version}.log", source=source,
                                        **product_intervals())
                    operator.start()
                    fresh = True
                else:
                    fresh = False
                assert operator.process is not None
                proc = psutil.Process(operator.process.pid)
                row: dict[str, Any] = {"version": version, "clusters": count}
                if turn == 0:
                    heartbeats.write_now(new)
                    t0 = time.monotonic()
                    _create(kubeconfig, namespace, new)
                    names += new
                    heartbeats.clusters = list(names)
                    settled, settled_at = _wait_settled(custom, apps, namespace, names, log)
                    row.update(settled=len(settled), create_s=round(settled_at - t0, 1))
                if fresh and turn > 0:
                    row["resume_s"] = round(_resumed(operator, count, log), 1)
                    settled = _settled(custom, apps, namespace)
                    row["settled"] = len(settled)
                time.sleep(min(10.0, rest_s))  # let the creation's tail (Events, status) pass
                cpu0, t_rest = _cpu_seconds(proc), time.monotonic()
                time.sleep(rest_s)
                cpu = (_cpu_seconds(proc) - cpu0) / (time.monotonic() - t_rest) * 100
                rss = proc.memory_info().rss / 2**20
                # Only settled clusters have a StatefulSet whose generation can move.
                chosen = rng.sample(sorted(settled), min(spec_changes, len(settled)))
                latencies, timed_out = _spec_changes(
                    lambda name, mark: _spec_change_latency(custom, apps, namespace, name, mark), chosen,
                    f"{version}-{count}")
                row.update({
                    "rss_mib": round(rss, 1), "cpu_rest_pct": round(cpu, 1), "spec_changes": len(latencies),
                    "spec_changes_timed_out": timed_out,
                    "spec_to_patch_p50_ms": round(percentile(latencies, 50), 1),
                    "spec_to_patch_p95_ms": round(percentile(latencies, 95), 1),
                    "spec_to_patch_max_ms": round(max(latencies, default=0.0), 1),
                })
                if churn_per_s > 0 and count == max(counts):
                    idle = [n for n in rng.sample(sorted(settled), len(settled)) if n not in chosen]
                    row.update(_churn(custom, apps, namespace, idle, churn_per_s, churn_s, proc, f"{version}-{count}"))
                rows.append(row)
                log(f"  operator {version} with {count} clusters: {row.get('settled')} settled, RSS {rss:.0f} MiB, "
                    f"CPU at rest {cpu:.1f}% of a core, spec->patch p50 {percentile(latencies, 50):.0f} ms "
                    f"p95 {percentile(latencies, 95):.0f} ms ({timed_out} past {SPEC_CHANGE_TIMEOUT_S:.0f} s); "
                    f"churn {row.get('churn_per_s', '-')}/s: CPU {row.get('cpu_churn_pct', '-')}%, "
                    f"p95 {row.get('churn_p95_ms', '-')} ms")
                if not operator.alive():
                    raise AssertionError(f"the operator exited: see {operator.log}")
            versions.reverse()  # the version running now creates the next size's clusters
    finally:
        heartbeats.stop()
        if operator is not None:
            operator.stop()
        kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=false", check=False)
    return rows
