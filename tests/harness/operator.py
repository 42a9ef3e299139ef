"""Running the real operator against a real apiserver, and the Leases a test writes by hand.

In the k8s and e2e tiers the pods are kwok pods: no store runs in them. `Sidecars`
(tests/harness/sidecars.py) does what each pod's sidecar would do and writes what it would
write; `heartbeat_lease` and `membership_lease` build single Leases with the sidecar's own code
for tests that place them by hand.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kubernetes import client, config
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from raftset import contract, engines
from raftset.membership import RaftMember, RaftMembership
from raftset.sidecar.pure import membership
from raftset.sidecar.pure.heartbeat import Heartbeat, lease_body, rfc3339
from raftset.operator.pure.settings import OperatorSettings
from tools.devcluster.net import free_port

from tests.harness.sidecars import Sidecars, member_id  # noqa: F401 - the tests import them from here
from tests.harness.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


def heartbeat_lease(namespace: str, cluster: str, pod: str, *, role: str, member_id: str,
                    healthy: bool = True, lease_seconds: int = 30) -> dict[str, Any]:
    """The Lease a member's sidecar writes, built by the sidecar's own code: a healthy voter serves
    linearizable reads, a learner or an unhealthy member does not (raftset.sidecar.pure.readiness)."""
    voting = role in (contract.ROLE_LEADER, contract.ROLE_FOLLOWER)
    reason = "" if healthy and voting else "no leader" if not healthy else "a learner, not a voter yet"
    beat = Heartbeat(member_id=member_id, name=pod, role=role, healthy=healthy, raft_term=2,
                     raft_index=100, raft_applied_index=100, time=rfc3339(datetime.now(timezone.utc)), cluster_id="c1",
                     ready=not reason, ready_reason=reason)
    return lease_body(pod, namespace, cluster, beat, duration=lease_seconds, owner=None)


def api(kubeconfig: str) -> client.ApiClient:
    return config.new_client_from_config(config_file=kubeconfig)


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", *args], input=stdin,
                          capture_output=True, text=True, check=check, timeout=60)


def delete_run_namespace(kubeconfig: str, namespace: str) -> None:
    """Delete a namespace whose pods a `PodRunner` ran, once the runner has stopped them.

    kubelet confirms a terminating pod's deletion once its containers are gone; with the runner
    closed nobody would, so its pods, then the claims they hold (pvc-protection), then the hostPath
    volumes bound to those would stay for the plane's lifetime (a full campaign's filled the disk).
    The namespace goes first: a terminating namespace admits no new pod to confirm again."""
    kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=false", check=False)
    kubectl(kubeconfig, "delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force",
            "--wait=false", check=False)


class Operator:
    """The operator as a real subprocess, so a test can SIGKILL it mid-scale."""

    def __init__(self, kubeconfig: str, log: Path, default_kind: str = "StatefulSet",
                 args: tuple[str, ...] = (), source: Path | None = None, **env: str) -> None:
        """`source`: another checkout whose operator runs (the benchmark's baseline), else this one."""
        self.kubeconfig = kubeconfig
        self.source = source
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
        if source is not None:  # its folders before this checkout's editable install; no .pyc written there
            self.env["PYTHONPATH"] = os.pathsep.join(str(source / d) for d in ("", "operator", "sidecar", "plugin"))
            self.env["PYTHONDONTWRITEBYTECODE"] = "1"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def metrics_url(self) -> str:
        """The operator's /metrics (RAFTSET_METRICS_ADDRESS, on loopback)."""
        return f"http://{self.env['RAFTSET_METRICS_ADDRESS']}/metrics"

    def _samples(self, name: str) -> list[Sample]:
        """The samples of one metric, asked for alone (`name[]`: at thousands of clusters the whole
        scrape is megabytes of per-cluster gauges the operator would render for nothing)."""
        url = f"{self.metrics_url}?{urllib.parse.urlencode({'name[]': name})}"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        return [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]

    def reconciles(self, namespace: str, cluster: str) -> float:
        """How many reconciles of this cluster ran to their end (raftset_cluster_reconciles_total)."""
        return self.cluster_reconciles(namespace).get(cluster, 0.0)

    def cluster_reconciles(self, namespace: str) -> dict[str, float]:
        """Per cluster of `namespace`, how many of its reconciles ran to their end in this process."""
        counts: dict[str, float] = {}
        for s in self._samples("raftset_cluster_reconciles_total"):
            if s.labels.get("namespace") == namespace:
                counts[s.labels["cluster"]] = counts.get(s.labels["cluster"], 0.0) + s.value
        return counts

    def all_reconciles(self) -> float:
        """How many reconciles this process ran, of every cluster and result (raftset_operator_reconciles_total)."""
        return sum(s.value for s in self._samples("raftset_operator_reconciles_total"))

    def rounds_pass(self, namespace: str, cluster: str, count: int = 2, timeout: float = 60.0) -> None:
        """Wait until `count` more reconciles of the cluster ran to their end: a test that then asserts
        that the operator did nothing knows it decided (a whole reconcile began after this call)."""
        start = self.reconciles(namespace, cluster)
        wait_for(lambda: self.reconciles(namespace, cluster) >= start + count, timeout,
                 f"{count} more reconciles of {namespace}/{cluster}")

    def start(self) -> None:
        out = self.log.open("ab")
        self.liveness = f"http://127.0.0.1:{free_port('127.0.0.1')}/healthz"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "raftset.operator", "--liveness", self.liveness, *self.args],
            env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=self.source or ROOT)

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
    defaults = OperatorSettings()
    return {"RAFTSET_RECONCILE_INTERVAL": str(defaults.reconcile_interval),
            "RAFTSET_RESYNC_SECONDS": str(defaults.resync_seconds),
            "RAFTSET_RETRY_SECONDS": str(defaults.retry_seconds)}


def membership_lease(namespace: str, cluster: str, leader: int, members: dict[int, bool], index: int,
                     lease_seconds: int = 30, silent: Collection[int] = ()) -> dict[str, Any]:
    """The membership Lease the leader's sidecar writes: `members` maps ordinal -> learner; the
    `silent` ordinals did not answer the leader's Status call."""
    record = RaftMembership(
        leader_id=member_id(leader), leader=contract.pod_name(cluster, leader), term=2, index=index,
        members=tuple(RaftMember(id=member_id(o), name=contract.pod_name(cluster, o), ordinal=o,
                                 peer_urls=(f"http://{contract.pod_name(cluster, o)}:2380",), learner=learner,
                                 started=True, raft_index=None if o in silent else index,
                                 applied_index=None if o in silent else index)
                      for o, learner in sorted(members.items())),
        published=rfc3339(datetime.now(timezone.utc)))
    return membership.lease_body(cluster, namespace, record, duration=lease_seconds, owner=None)


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
