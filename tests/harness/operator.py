"""Running the real operator against a real apiserver, and standing in for the sidecars.

In the k8s and e2e tiers the pods are kwok pods: no store runs in them. `Sidecars`
writes the heartbeat Leases and the leader's membership Lease through the real API
exactly as the sidecar writes them (`raftset.sidecar.heartbeat.lease_body`,
`raftset.sidecar.membership.lease_body`), so the operator sees what it would see in a
real cluster: a Lease per running pod, the leader marked, Leases gone with their pods,
and a Raft membership that loses a member when its pod leaves (unless its leave is
refused).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from raftset import contract, engines
from raftset.membership import RaftMember, RaftMembership
from raftset.operator.settings import Settings
from raftset.sidecar import membership
from raftset.sidecar.heartbeat import Heartbeat, lease_body, rfc3339
from tools.devcluster.net import free_port

from tests.harness.waiting import wait_for  # noqa: F401 - the tests of this harness import it from here

ROOT = Path(__file__).resolve().parents[2]


def heartbeat_lease(namespace: str, cluster: str, pod: str, *, role: str, member_id: str,
                    healthy: bool = True, lease_seconds: int = 30) -> dict[str, Any]:
    """The Lease a member's sidecar writes, built by the sidecar's own code."""
    beat = Heartbeat(member_id=member_id, name=pod, role=role, healthy=healthy, raft_term=2,
                     raft_index=100, raft_applied_index=100, time=rfc3339(datetime.now(timezone.utc)), cluster_id="c1")
    return lease_body(pod, namespace, cluster, beat, duration=lease_seconds, owner=None)


def api(kubeconfig: str) -> client.ApiClient:
    return config.new_client_from_config(config_file=kubeconfig)


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", *args], input=stdin,
                          capture_output=True, text=True, check=check, timeout=60)


class Operator:
    """The operator as a real subprocess, so a test can SIGKILL it mid-scale."""

    def __init__(self, kubeconfig: str, log: Path, default_kind: str = "StatefulSet",
                 args: tuple[str, ...] = (), **env: str) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        self.args = args
        self.liveness = ""  # kopf's liveness URL, or the standby's (set by start)
        self.env = {
            **os.environ,
            "KUBECONFIG": kubeconfig,
            "RAFTSET_DEFAULT_WORKLOAD_KIND": default_kind,
            # The tiers' operators serve both backends (their credentials allow both); the
            # overlays' own choice is what tests/*/test_install_matrix.py runs.
            "RAFTSET_BACKENDS": "StatefulSet,AdvancedStatefulSet",
            "RAFTSET_RECONCILE_INTERVAL": "1",
            "RAFTSET_RESYNC_SECONDS": "5",
            "RAFTSET_RETRY_SECONDS": "5",
            "RAFTSET_METRICS_ADDRESS": f"127.0.0.1:{free_port('127.0.0.1')}",
            **env,
        }
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def metrics_url(self) -> str:
        """The operator's /metrics (RAFTSET_METRICS_ADDRESS, on loopback)."""
        return f"http://{self.env['RAFTSET_METRICS_ADDRESS']}/metrics"

    def start(self) -> None:
        out = self.log.open("ab")
        self.liveness = f"http://127.0.0.1:{free_port('127.0.0.1')}/healthz"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "raftset.operator", "--liveness", self.liveness, *self.args],
            env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


def product_intervals() -> dict[str, str]:
    """The operator's own reconcile, resync and retry intervals (`Operator` defaults to faster
    ones for the tiers): what the benchmarks measure."""
    defaults = Settings()
    return {"RAFTSET_RECONCILE_INTERVAL": str(defaults.reconcile_interval),
            "RAFTSET_RESYNC_SECONDS": str(defaults.resync_seconds),
            "RAFTSET_RETRY_SECONDS": str(defaults.retry_seconds)}


def member_id(ordinal: int) -> str:
    """The member id the stand-in gives each ordinal's member."""
    return f"{0x1000 + ordinal:x}"


def membership_lease(namespace: str, cluster: str, leader: int, members: dict[int, bool], index: int,
                     lease_seconds: int = 30) -> dict[str, Any]:
    """The membership Lease the leader's sidecar writes: `members` maps ordinal -> learner."""
    record = RaftMembership(
        leader_id=member_id(leader), leader=contract.pod_name(cluster, leader), term=2, index=index,
        members=tuple(RaftMember(id=member_id(o), name=contract.pod_name(cluster, o), ordinal=o,
                                 peer_urls=(f"http://{contract.pod_name(cluster, o)}:2380",), learner=learner,
                                 started=True, raft_index=index, applied_index=index)
                      for o, learner in sorted(members.items())),
        published=rfc3339(datetime.now(timezone.utc)))
    return membership.lease_body(cluster, namespace, record, duration=lease_seconds, owner=None)


class Sidecars:
    """Heartbeat Leases for every Running pod of one cluster, with a chosen leader, and the
    Raft membership the leader publishes.

    When the leader's pod goes away the lowest remaining ordinal becomes leader, as the
    sidecar's MoveLeader hand-off would do. A member joins Raft when its pod runs and
    leaves Raft when its pod is gone, unless its ordinal is in `refusing` (its leave was
    refused: the member stays in Raft without a pod).
    """

    def __init__(self, api_client: client.ApiClient, namespace: str, cluster: str,
                 leader: int = 0, interval: float = 0.3, lease_seconds: int = 6) -> None:
        self.core = client.CoreV1Api(api_client)
        self.leases = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.cluster = cluster
        self.leader = leader
        self.unhealthy: set[int] = set()
        self.learners: set[int] = set()
        self.refusing: set[int] = set()
        self.raft: set[int] = set()  # ordinals with a member in Raft
        self.index = 1  # the raft index: every tick stands for some writes
        self.interval = interval
        self.lease_seconds = lease_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.leaders_seen: list[int] = []
        self.errors: list[str] = []
        self._seen: set[int] = set()

    def __enter__(self) -> Sidecars:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        # A stand-in that silently stopped writing would make the operator look stuck.
        assert len(self.errors) < 20, f"heartbeat stand-in kept failing: {self.errors[-3:]}"

    def _running_ordinals(self) -> dict[int, dict[str, Any]]:
        selector = f"{contract.LABEL_INSTANCE}={self.cluster}"
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        return {
            contract.ordinal_of(p.metadata.name): p
            for p in pods
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        }

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception as error:  # noqa: BLE001 - recorded, asserted on exit, retried
                self.errors.append(repr(error))

    def tick(self) -> None:
        running = self._running_ordinals()
        if self.leader in self._seen and self.leader not in running and running:
            self.leader = min(running)  # the hand-off: its pod went away
        self._seen.update(running)
        if not self.leaders_seen or self.leaders_seen[-1] != self.leader:
            self.leaders_seen.append(self.leader)
        for ordinal, pod in running.items():
            role = (contract.ROLE_LEARNER if ordinal in self.learners
                    else contract.ROLE_LEADER if ordinal == self.leader else contract.ROLE_FOLLOWER)
            body = heartbeat_lease(self.namespace, self.cluster, pod.metadata.name, role=role,
                                   member_id=member_id(ordinal), healthy=ordinal not in self.unhealthy,
                                   lease_seconds=self.lease_seconds)
            self._apply(body)
        self.raft = set(running) | (self.raft & self.refusing)
        self.index += 1
        if running:
            self._apply(membership_lease(self.namespace, self.cluster, self.leader,
                                         {o: o in self.learners for o in self.raft}, self.index))
        selector = f"{contract.LABEL_INSTANCE}={self.cluster},{contract.LABEL_HEARTBEAT}=true"
        for lease in self.leases.list_namespaced_lease(self.namespace, label_selector=selector).items:
            if contract.ordinal_of(lease.spec.holder_identity) not in running:
                self._delete(lease.metadata.name)

    def _apply(self, body: dict[str, Any]) -> None:
        # Server-side apply, as the sidecar writes it (a Lease update needs a resourceVersion).
        self.leases.patch_namespaced_lease(
            body["metadata"]["name"], self.namespace, body, field_manager="raftset-sidecar", force=True,
            _content_type="application/apply-patch+yaml")

    def _delete(self, name: str) -> None:
        try:
            self.leases.delete_namespaced_lease(name, self.namespace)
        except ApiException as error:
            if error.status != 404:
                raise


def install_crds(kubeconfig: str) -> None:
    """The CRDs as `kubectl apply -k` installs them, waited for until the apiserver serves them."""
    kubectl(kubeconfig, "apply", "--server-side", "-k", str(ROOT / "crds"))
    for engine in engines.ENGINES.values():
        kubectl(kubeconfig, "wait", "--for=condition=Established", f"crd/{engine.plural}.{contract.GROUP}",
                "--timeout=60s")


@contextmanager
def running_operator(kubeconfig: str, log: Path, default_kind: str = "StatefulSet", **env: str) -> Iterator[Operator]:
    """The CRDs installed and the operator running as a process until the block ends: the
    tiers' `operator` fixtures and the benchmarks that go through the product share it."""
    install_crds(kubeconfig)
    op = Operator(kubeconfig, log, default_kind=default_kind, **env)
    op.start()
    try:
        yield op
    finally:
        op.stop()
