"""Operator cost on the local control plane: RSS and CPU at rest, spec-change latency, failover.

The real operator runs as a subprocess (`tests.harness.operator.Operator`) with its
default intervals against the full local plane (controller-manager, scheduler, OpenKruise,
kwok), whose loopback block is sized for the largest count (`tools/devcluster/net.py`).
Clusters are one-member EtcdClusters on the builtin StatefulSet, so their kwok pods fit the
fake nodes; each has a heartbeat Lease and a membership Lease renewed every 10 s (the sidecar's
default; its leader refreshes the membership record at that interval) by a stand-in
(`Heartbeats`: each renewal started at its due time, how late each was answered recorded), so the
operator sees what it would see in a live cluster at rest.

At rest: after the clusters are created and settled, CPU over a quiet interval (psutil
cpu_times of the operator process) and its RSS. Latency: one cluster at a time, a label
is added to `spec.podTemplate.labels` and the StatefulSet's `metadata.generation` is
polled until it moves. Failover (`_failover`, at the largest size): two replicas with leader
election, the acting one SIGKILLed, timed until the standby acts and has reconciled every
cluster. The bench's own looks at thousands of objects list metadata only, undecoded.
"""

from __future__ import annotations

import asyncio
import json
import random
import ssl
import threading
import time
import uuid
from datetime import datetime, timezone
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import psutil
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from raftset import contract
from tests.bench.stats import percentile
from raftset.operator.pure.election import LEASE_NAME, Timing
from tests.harness.operator import (ROOT, Operator, api, heartbeat_lease, kubectl, member_id, membership_lease,
                                    product_intervals)
from tests.harness.waiting import wait_for

COLUMNS = ("version", "clusters", "settled", "apply_s", "create_s", "resume_s", "rss_mib", "cpu_rest_pct",
           "spec_changes", "spec_changes_timed_out", "spec_to_patch_p50_ms", "spec_to_patch_p95_ms",
           "spec_to_patch_max_ms", "lease_changes", "lease_changes_timed_out", "lease_to_status_p50_ms", "lease_to_status_p95_ms", "churn_per_s", "churn_changes", "churn_timed_out", "cpu_churn_pct", "churn_p50_ms",
           "churn_p95_ms", "heartbeat_late_p50_s", "heartbeat_late_p99_s", "heartbeat_late_max_s", "heartbeats_failed",
           "size_s")
VERSION, BASELINE = "this", "baseline"  # the checkout measured, and the other one (--operator-baseline)
STALL_S = 120.0  # give up waiting for the clusters to settle after this long without progress
HEARTBEAT_S = 10.0  # the sidecar's default RAFTSET_HEARTBEAT_INTERVAL; Lease duration 3x
CREATORS = 4  # threads creating a size's clusters
IN_FLIGHT = 256  # heartbeat renewals awaiting their answer at once, at most (connections to the apiserver)
POLL_S = 0.02
SPEC_CHANGE_TIMEOUT_S = 30.0  # a change not in the workload by then is counted at this (a lower bound)
MAX_TIMEOUTS = 3
LEASE_CHANGES = 10  # clusters whose heartbeat turns unhealthy, one at a time, per size and version
RESUME_S = 300.0
PATIENCE_PER_CLUSTER_S = 1.0  # 1000 resumed in 12 min on 2 busy cores (2026-11-28): "at rest" must come after
REPLICAS = ("replica-a", "replica-b")  # the failover's acting replica, then its standby
FAILOVER_TIMEOUT_S = 600.0
FAILOVER_POLL_S = 0.1
FAILOVER_TIMES = ("takeover_s", "first_reconcile_s", "spec_change_s", "all_reconciled_s")
FAILOVER_COLUMNS = ("version", "clusters", "lease_duration_s", "resume_s", *FAILOVER_TIMES, "reconciled")
HANDLED = f"{contract.GROUP}/last-handled-configuration"  # kopf's diffbase (raftset.operator.handlers.configure)


def due(start: float, round_: int, position: int, clusters: int) -> float:
    """When cluster `position` of `clusters` is due in round `round_`: spread over the interval, as
    independent sidecars would renew."""
    return start + round_ * HEARTBEAT_S + position * HEARTBEAT_S / clusters


def lateness(samples: Sequence[float]) -> dict[str, float]:
    """How late the renewals were answered: p50, p99 and the latest, in seconds."""
    return {"heartbeat_late_p50_s": round(percentile(samples, 50), 2),
            "heartbeat_late_p99_s": round(percentile(samples, 99), 2),
            "heartbeat_late_max_s": round(max(samples, default=0.0), 2)}


class Heartbeats:
    """One heartbeat Lease and one membership Lease per cluster (its one pod, leading), renewed every HEARTBEAT_S.

    An event loop in a thread of its own starts each renewal at its due time (`due`) without waiting
    for the ones before it, up to IN_FLIGHT at once, as thousands of independent sidecars would: a
    slow answer delays no other renewal. (Writer threads taking turns fell 19 s behind at 300
    clusters and a load of 9: while the apiserver answered in up to a second, six writers renewed
    fewer than the 30 a second due.) How late each renewal was answered against its due time is
    recorded (`take_lateness`), because a stand-in that falls behind makes clusters look unhealthy
    and measures something else.
    """

    def __init__(self, kubeconfig: str, namespace: str) -> None:
        configuration = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        self._url = f"{configuration.host}/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._tls = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        if configuration.cert_file:
            self._tls.load_cert_chain(configuration.cert_file, configuration.key_file)
        token = configuration.get_api_key_with_prefix("authorization")
        self._headers = {"Content-Type": "application/apply-patch+yaml", **({"Authorization": token} if token else {})}
        self.namespace = namespace
        self.failed = 0  # renewals the apiserver refused or that timed out (the next round renews them)
        self._schedule: tuple[float, tuple[str, ...]] = (0.0, ())  # (when its first round began, clusters)
        self._held: set[str] = set()  # clusters not renewed for now: a measurement writes their Leases
        self._late: list[float] = []
        self._took: list[float] = []  # how long each renewal's request took, for the log
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._session: aiohttp.ClientSession | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="bench-heartbeats")
        self._planner: Future[None] | None = None

    def start(self) -> None:
        self._thread.start()
        self._planner = asyncio.run_coroutine_threadsafe(self._plan(), self._loop)

    def follow(self, clusters: Sequence[str]) -> None:
        """Renew these clusters' Leases from now on, a new schedule whose first round begins now (the
        clusters just created had theirs written by `write_now`; the others' next renewal comes
        within an interval, so no Lease waits more than two)."""
        with self._lock:
            self._schedule = (time.monotonic(), tuple(clusters))

    def write_now(self, names: Sequence[str]) -> None:
        """A Lease for each of `names` before its cluster exists, all at once (IN_FLIGHT at a time)."""
        async def all_of_them() -> None:
            now = time.monotonic()
            await asyncio.gather(*(self._renew(now, name, record=False) for name in names))

        asyncio.run_coroutine_threadsafe(all_of_them(), self._loop).result()

    async def _plan(self) -> None:
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._tls, limit=IN_FLIGHT))
        in_flight: set[asyncio.Task[None]] = set()
        schedule, round_ = self._schedule, 0
        try:
            while not self._done.is_set():
                if self._schedule is not schedule:
                    schedule, round_ = self._schedule, 0
                start, clusters = schedule
                if not clusters:
                    await asyncio.sleep(0.5)
                    continue
                for position, name in enumerate(clusters):
                    when = due(start, round_, position, len(clusters))
                    while (wait := when - time.monotonic()) > 0 and not self._done.is_set() \
                            and self._schedule is schedule:
                        await asyncio.sleep(min(wait, 0.5))
                    if self._done.is_set() or self._schedule is not schedule:
                        break
                    if name in self._held:
                        continue
                    task = asyncio.create_task(self._renew(when, name))
                    in_flight.add(task)
                    task.add_done_callback(in_flight.discard)
                else:
                    round_ += 1
        finally:
            await asyncio.gather(*in_flight, return_exceptions=True)
            await self._session.close()

    async def _renew(self, when: float, cluster: str, record: bool = True) -> None:
        """What the one member's sidecar writes every interval as it leads: its heartbeat Lease and the
        membership Lease (raftset.sidecar.shells.membership refreshes it every heartbeat interval)."""
        pod = contract.pod_name(cluster, 0)
        bodies = (heartbeat_lease(self.namespace, cluster, pod, role=contract.ROLE_LEADER, member_id=member_id(0),
                                  lease_seconds=int(3 * HEARTBEAT_S)),
                  membership_lease(self.namespace, cluster, 0, {0: False}, index=100,
                                   lease_seconds=int(3 * HEARTBEAT_S)))
        began = time.monotonic()
        refused = False
        for body in bodies:
            refused |= not await self._apply(body)
        answered = time.monotonic()
        with self._lock:
            self.failed += refused  # a busy apiserver: the next round renews it
            if record:
                self._late.append(answered - when)
                self._took.append(answered - began)

    async def _apply(self, body: dict[str, Any]) -> bool:
        """Server-side apply, as the sidecar writes: the apiserver refuses a Lease update (PUT) without
        a resourceVersion (422), which left every cluster leaderless and Degraded."""
        assert self._session is not None
        try:
            async with self._session.patch(
                    f"{self._url}/{body['metadata']['name']}?fieldManager=raftset-sidecar&force=true",
                    data=json.dumps(body), headers=self._headers,
                    timeout=aiohttp.ClientTimeout(total=HEARTBEAT_S)) as response:
                await response.read()
                return response.status < 300
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False

    def hold(self, cluster: str) -> None:
        """Stop renewing `cluster`'s Leases (a renewal already sent still lands) until `release`."""
        with self._lock:
            self._held.add(cluster)

    def release(self, cluster: str) -> None:
        """Renew `cluster`'s Leases again, the first time now."""
        with self._lock:
            self._held.discard(cluster)
        asyncio.run_coroutine_threadsafe(self._renew(time.monotonic(), cluster, record=False), self._loop).result(30)

    def write(self, body: dict[str, Any]) -> bool:
        """One Lease written as the sidecar writes it, on the stand-in's own connections."""
        return asyncio.run_coroutine_threadsafe(self._apply(body), self._loop).result(30)

    def take_lateness(self) -> list[float]:
        """How late (s) each renewal since the last call was answered against its due time."""
        with self._lock:
            taken, self._late = self._late, []
        return taken

    def took(self) -> list[float]:
        """How long (s) each renewal's request since the last call took."""
        with self._lock:
            taken, self._took = self._took, []
        return taken

    def stop(self) -> None:
        self._done.set()
        if self._planner is not None:
            self._planner.result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)


def _cluster(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": contract.API_VERSION, "kind": "EtcdCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1, "workloadKind": "StatefulSet", "storage": {"ephemeral": True},
                 "tls": {"provider": "disabled"}},
    }


def _create(kubeconfig: str, namespace: str, names: Sequence[str]) -> None:
    """Each cluster created once, CREATORS at a time on connections of their own, the answers left
    undecoded (`kubectl apply` of 50 at a time took 16.6 s for 30 clusters at a load of 10)."""
    def create(share: Sequence[str]) -> None:
        custom = client.CustomObjectsApi(api(kubeconfig))
        for name in share:
            response = custom.create_namespaced_custom_object(
                contract.GROUP, contract.VERSION, namespace, "etcdclusters", _cluster(name, namespace),
                _preload_content=False)
            response.read()
            response.release_conn()

    with ThreadPoolExecutor(CREATORS) as pool:
        list(pool.map(create, [names[i::CREATORS] for i in range(CREATORS)]))


METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
WATCHED_METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"  # each watch event's object


def _workloads(apps: client.AppsV1Api, namespace: str) -> tuple[dict[str, int], str]:
    """Each StatefulSet's generation by name, and the list's resourceVersion: listed as metadata only
    and left undecoded by the client (5000 whole StatefulSets are tens of MB, seconds of the bench's
    CPU on each look)."""
    response = apps.list_namespaced_stateful_set(namespace, _headers={"Accept": METADATA_ONLY},
                                                 _preload_content=False)
    try:
        listed = json.loads(response.data)
    finally:
        response.release_conn()
    items = listed["items"] or []  # null when there are none
    return ({item["metadata"]["name"]: item["metadata"].get("generation", 0) for item in items},
            listed["metadata"]["resourceVersion"])


def _settled(custom: client.CustomObjectsApi, apps: client.AppsV1Api, namespace: str) -> set[str]:
    """Clusters with their StatefulSet, a status for their current generation, and kopf's record that
    its create handler is done (a round other than that handler's may have written the rest first)."""
    workloads = _workloads(apps, namespace)[0]
    clusters = custom.list_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters")
    return {c["metadata"]["name"] for c in clusters["items"]
            if c["metadata"]["name"] in workloads
            and (c.get("status") or {}).get("observedGeneration") == c["metadata"]["generation"]
            and HANDLED in (c["metadata"].get("annotations") or {})}


def settle_poll_s(clusters: int) -> float:
    """How often the bench looks at every cluster while they settle: each look lists them all, so at
    thousands it would be the apiserver's (and this process's) main work; 1 s up to 1000, 5 s at 5000."""
    return max(1.0, clusters / 1000)


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
        time.sleep(settle_poll_s(len(names)))


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


def _leader_shown(custom: client.CustomObjectsApi, namespace: str, name: str) -> str:
    response = custom.get_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters", name,
                                                   _preload_content=False)
    try:
        return str((json.loads(response.data).get("status") or {}).get("leader") or "")
    finally:
        response.release_conn()


def _lease_reaction(custom: client.CustomObjectsApi, heartbeats: Heartbeats, namespace: str, name: str,
                    timeout: float = SPEC_CHANGE_TIMEOUT_S) -> float | None:
    """Seconds from a member's heartbeat Lease turning leaderless and unhealthy (its sidecar lost
    Raft's leader) until the operator's status no longer names a leader: the path every decision
    made on the sidecars' word takes (the Lease watch, the round, the planner, the status). None
    when it did not within `timeout`. The cluster's stand-in renewals wait meanwhile, then resume."""
    pod = contract.pod_name(name, 0)
    heartbeats.hold(name)
    try:
        time.sleep(1.0)  # a renewal sent just before the hold lands first
        t0 = time.monotonic()
        assert heartbeats.write(heartbeat_lease(namespace, name, pod, role=contract.ROLE_FOLLOWER,
                                                member_id=member_id(0), healthy=False,
                                                lease_seconds=int(3 * HEARTBEAT_S))), f"{name}'s Lease refused"
        while time.monotonic() - t0 < timeout:
            if not _leader_shown(custom, namespace, name):
                return time.monotonic() - t0
            time.sleep(POLL_S)
        return None
    finally:
        heartbeats.release(name)
        wait_for(lambda: _leader_shown(custom, namespace, name), timeout, f"{name}'s leader shown again")


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
    generation, listed_version = _workloads(apps, namespace)
    stream = watch.Watch()
    done = threading.Event()

    def seen(name: str, moved_to: int) -> None:
        with lock:
            change = sent.get(name)
            if change is not None and moved_to > change[1]:
                latencies.append((time.monotonic() - change[0]) * 1000)
                del sent[name]

    def follow() -> None:
        version = listed_version
        while not done.is_set():
            try:
                # Metadata only, as plain JSON: decoding whole V1StatefulSet models cost the bench, which
                # also renews every heartbeat, enough CPU to delay what it measured.
                for event in stream.stream(apps.list_namespaced_stateful_set, namespace, resource_version=version,
                                           timeout_seconds=int(seconds + SPEC_CHANGE_TIMEOUT_S + 30),
                                           _headers={"Accept": WATCHED_METADATA_ONLY}, deserialize=False):
                    meta = event["object"]["metadata"]
                    seen(meta["name"], meta.get("generation", 0))
                    version = meta["resourceVersion"]
            except Exception:  # noqa: BLE001 - the stream broke (a timeout, a 410): list, then watch again
                again, version = _workloads(apps, namespace)
                for name, moved_to in again.items():
                    seen(name, moved_to)

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


def patience_s(clusters: int, floor: float) -> float:
    """How long the bench waits for an operator to get through every cluster: `floor`, or
    PATIENCE_PER_CLUSTER_S each at thousands (a measurement "at rest" taken while rounds of the
    resume still queue measures the resume)."""
    return max(floor, clusters * PATIENCE_PER_CLUSTER_S)


def _resumed(operator: Operator, namespace: str, names: Sequence[str], log: Callable[[str], None]) -> float:
    """Seconds until a just-started operator ran a reconcile of each cluster to its end (its resume
    rounds), at most `patience_s`."""
    t0 = time.monotonic()
    limit = patience_s(len(names), RESUME_S)
    done = 0
    while time.monotonic() - t0 < limit:
        try:
            counts = operator.cluster_reconciles(namespace)
            # An operator older than the per-cluster counter (a baseline) is counted by its total.
            done = sum(1 for name in names if counts.get(name, 0.0) >= 1) if counts \
                else min(len(names), int(operator.all_reconciles()))
            if done == len(names):
                break
        except OSError:
            pass  # its metrics are not served yet
        time.sleep(settle_poll_s(len(names)))
    else:
        log(f"  operator: {done} of {len(names)} clusters reconciled {limit:.0f}s after its start")
    return time.monotonic() - t0


def _holder(leases: client.CoordinationV1Api, namespace: str) -> client.V1Lease | None:
    try:
        return leases.read_namespaced_lease(LEASE_NAME, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _failover(kubeconfig: str, workdir: Path, namespace: str, names: Sequence[str], victim: str,
              source: Path | None, version: str, log: Callable[[str], None]) -> dict[str, Any]:
    """Two replicas with leader election on the clusters at rest; the acting one is SIGKILLed once it
    has reconciled every cluster and the other stands by. Seconds from the kill until: the standby
    holds the operator Lease (its own acquireTime), its first reconcile ran to its end (its metrics),
    a spec change made at the kill is in its StatefulSet, and every cluster was reconciled by it."""
    api_client = api(kubeconfig)
    leases, apps = client.CoordinationV1Api(api_client), client.AppsV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    acting, standby = (Operator(kubeconfig, workdir / f"operator-{version}-{name}.log", source=source,
                                args=("--leader-elect", "--lease-namespace", namespace), POD_NAME=name,
                                **product_intervals()) for name in REPLICAS)
    try:
        acting.start()
        wait_for(lambda: (_holder(leases, namespace) or client.V1Lease(spec=client.V1LeaseSpec())).spec.holder_identity
                 == REPLICAS[0], 60, "the first replica holding the operator Lease")
        resume_s = _resumed(acting, namespace, names, log)
        standby.start()
        wait_for(lambda: "standing by" in standby.log.read_text(), 60, "the second replica standing by")
        lease = _holder(leases, namespace)
        assert lease is not None and lease.spec.holder_identity == REPLICAS[0], lease
        before = apps.read_namespaced_stateful_set(victim, namespace).metadata.generation
        killed_at, killed = datetime.now(timezone.utc), time.monotonic()
        acting.kill()
        custom.patch_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters", victim,
                                              {"spec": {"podTemplate": {"labels": {"bench-failover": version}}}})
        seen: dict[str, float] = {}
        reconciled, next_count = 0, 0.0
        while time.monotonic() - killed < patience_s(len(names), FAILOVER_TIMEOUT_S) and len(seen) < 4:
            since = time.monotonic() - killed
            if "takeover_s" not in seen:
                lease = _holder(leases, namespace)
                if lease is not None and lease.spec.holder_identity == REPLICAS[1]:
                    seen["takeover_s"] = (lease.spec.acquire_time - killed_at).total_seconds()
            if "spec_change_s" not in seen and (
                    apps.read_namespaced_stateful_set(victim, namespace).metadata.generation != before):
                seen["spec_change_s"] = since
            try:
                if "first_reconcile_s" not in seen and standby.all_reconciles() > 0:
                    seen["first_reconcile_s"] = since
                if "first_reconcile_s" in seen and since >= next_count:
                    counts = standby.cluster_reconciles(namespace)
                    reconciled = sum(1 for name in names if counts.get(name, 0.0) >= 1)
                    if reconciled == len(names):
                        seen["all_reconciled_s"] = since
                    next_count = since + settle_poll_s(len(names))
            except OSError:
                pass  # its metrics are served once it acts
            time.sleep(FAILOVER_POLL_S)
        row = {"version": version, "clusters": len(names), "lease_duration_s": Timing.from_env().lease_duration,
               "resume_s": round(resume_s, 1), "reconciled": reconciled,
               **{column: round(seen[column], 1) if column in seen else None for column in FAILOVER_TIMES}}
        log(f"  operator {version} failover at {len(names)} clusters: {row}")
        if not standby.alive():
            raise AssertionError(f"the standby exited: see {standby.log}")
        return row
    finally:
        for replica in (acting, standby):
            replica.stop()


def bench(kubeconfig: str, workdir: Path, counts: Sequence[int], spec_changes: int, rest_s: float,
          log: Callable[[str], None] = print, *, baseline: Path | None = None, quiet_s: float = 10.0,
          churn_per_s: float = 10.0,
          churn_s: float = 30.0, failover: bool = True) -> dict[str, Any]:
    """A row per size (and per version: `baseline`, another checkout, is measured on the same clusters
    after this one, each operator alone; the one that did not create them resumed them), and with
    `failover` a row per version of two replicas at the largest size, the acting one killed.

    Returns {"operator": rows, "operator_failover": rows, "errors": what failed in the failover}."""
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
    heartbeats = Heartbeats(kubeconfig, namespace)
    rows: list[dict[str, Any]] = []
    failed_over: list[dict[str, Any]] = []
    errors: list[str] = []
    rng = random.Random(7)
    operator: Operator | None = None
    settled: set[str] = set()
    try:
        heartbeats.start()
        names: list[str] = []
        for count in sorted(counts):
            new = [f"c{i:04d}" for i in range(len(names), count)]
            for turn, (version, source) in enumerate(versions):
                began, failed_before = time.monotonic(), heartbeats.failed
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
                    wrote, cpu_wrote = time.monotonic(), time.process_time()
                    heartbeats.write_now(new)
                    wrote, cpu_wrote = time.monotonic() - wrote, time.process_time() - cpu_wrote
                    log(f"  operator: {len(new)} heartbeat Leases written in {wrote:.1f} s "
                        f"({len(new) / max(wrote, 1e-3):.0f} a second, "
                        f"{cpu_wrote / max(len(new), 1) * 1000:.2f} ms of the bench's CPU each)")
                    names += new
                    heartbeats.follow(names)  # renewed while they are created: thousands take minutes
                    t0 = time.monotonic()
                    _create(kubeconfig, namespace, new)
                    row["apply_s"] = round(time.monotonic() - t0, 1)
                    settled, settled_at = _wait_settled(custom, apps, namespace, names, log)
                    row.update(settled=len(settled), create_s=round(settled_at - t0, 1))
                if fresh and turn > 0:
                    row["resume_s"] = round(_resumed(operator, namespace, names, log), 1)
                    settled = _settled(custom, apps, namespace)
                    row["settled"] = len(settled)
                time.sleep(quiet_s)  # let the creation's tail (Events, status) pass
                cpu0, t_rest = _cpu_seconds(proc), time.monotonic()
                time.sleep(rest_s)
                cpu = (_cpu_seconds(proc) - cpu0) / (time.monotonic() - t_rest) * 100
                rss = proc.memory_info().rss / 2**20
                # Only settled clusters have a StatefulSet whose generation can move.
                chosen = rng.sample(sorted(settled), min(spec_changes, len(settled)))
                latencies, timed_out = _spec_changes(
                    lambda name, mark: _spec_change_latency(custom, apps, namespace, name, mark), chosen,
                    f"{version}-{count}")
                unhealthy = rng.sample(sorted(settled), min(LEASE_CHANGES, len(settled)))
                reactions, unseen = _spec_changes(lambda name, _: _lease_reaction(custom, heartbeats, namespace, name),
                                                  unhealthy, version)
                row.update({
                    "lease_changes": len(reactions), "lease_changes_timed_out": unseen, "lease_to_status_p50_ms": round(percentile(reactions, 50), 1),
                    "lease_to_status_p95_ms": round(percentile(reactions, 95), 1),
                    "rss_mib": round(rss, 1), "cpu_rest_pct": round(cpu, 1), "spec_changes": len(latencies),
                    "spec_changes_timed_out": timed_out,
                    "spec_to_patch_p50_ms": round(percentile(latencies, 50), 1),
                    "spec_to_patch_p95_ms": round(percentile(latencies, 95), 1),
                    "spec_to_patch_max_ms": round(max(latencies, default=0.0), 1),
                })
                if churn_per_s > 0 and count == max(counts):
                    idle = [n for n in rng.sample(sorted(settled), len(settled)) if n not in chosen]
                    row.update(_churn(custom, apps, namespace, idle, churn_per_s, churn_s, proc, f"{version}-{count}"))
                row.update(lateness(heartbeats.take_lateness()), heartbeats_failed=heartbeats.failed - failed_before,
                           size_s=round(time.monotonic() - began, 1))
                took = heartbeats.took()
                rows.append(row)
                log(f"  operator {version} with {count} clusters: {row.get('settled')} settled, RSS {rss:.0f} MiB, "
                    f"CPU at rest {cpu:.1f}% of a core, spec->patch p50 {percentile(latencies, 50):.0f} ms "
                    f"p95 {percentile(latencies, 95):.0f} ms ({timed_out} past {SPEC_CHANGE_TIMEOUT_S:.0f} s); Lease->status "
                    f"p50 {row['lease_to_status_p50_ms']} ms p95 {row['lease_to_status_p95_ms']} ms; "
                    f"churn {row.get('churn_per_s', '-')}/s: CPU {row.get('cpu_churn_pct', '-')}%, "
                    f"p95 {row.get('churn_p95_ms', '-')} ms; heartbeats late p99 {row['heartbeat_late_p99_s']} s "
                    f"max {row['heartbeat_late_max_s']} s, each took p50 {percentile(took, 50):.3f} s p99 "
                    f"{percentile(took, 99):.3f} s max {max(took, default=0.0):.3f} s ({row['heartbeats_failed']} failed); "
                    f"the size took {row['size_s']:.0f} s")
                if not operator.alive():
                    raise AssertionError(f"the operator exited: see {operator.log}")
            versions.reverse()  # the version running now creates the next size's clusters
        if failover:
            operator.stop()  # one replica acts at a time: the unelected one goes first
            operator = None
            for version, source in sorted(versions, key=lambda v: v[0] != VERSION):
                victim = rng.choice(sorted(settled))
                try:
                    failed_over.append(_failover(kubeconfig, workdir, namespace, names, victim, source, version, log))
                except Exception as exc:  # noqa: BLE001 - the cost rows stand; the failure is reported
                    log(f"  operator {version} failover FAILED: {exc!r}")
                    errors.append(f"operator failover ({version}): {type(exc).__name__}: {exc}")
    finally:
        heartbeats.stop()
        if operator is not None:
            operator.stop()
        kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=false", check=False)
    return {"operator": rows, "operator_failover": failed_over, "errors": errors}
