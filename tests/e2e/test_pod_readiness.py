"""A pod is Ready when its member serves, as kubelet's readinessProbe (`/readyz`) says.

Real operator, workload controller, sidecars and etcd members; the pod runner probes each
pod as rendered (tools.devcluster.kubelet.declared_probe) and writes the Ready condition, and
kwok leaves the readiness of the pods it runs to it. A follower's store is frozen (SIGSTOP):
its sidecar's linearizable read fails, /readyz says 503, and after the probe's
failureThreshold the pod turns NotReady and the workload's readyReplicas drops below its
replicas; thawed, it turns Ready again. The two other members keep quorum under a writer,
and the checker ends the test.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest

from raftset import contract
from tests.e2e.test_fullstack import FAST, assert_writes_flowed, stack
from tests.e2e.test_repair import running_store
from tests.harness.checker import Writer, check
from tests.harness.lab import http_get
from tests.harness.operator import Operator
from tests.harness.view import ClusterView
from tests.harness.waiting import wait_for
from tools.devcluster.podrunner import PodRunner, pod_ip

pytestmark = pytest.mark.e2e

VICTIM = 2  # a follower: leadership is moved to ordinal 0 first


def pod_ready(kv: ClusterView, ordinal: int) -> bool:
    pod = kv.core.read_namespaced_pod(contract.pod_name(kv.name, ordinal), kv.namespace)
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def ready_replicas(kv: ClusterView) -> int:
    return int((kv.workload().get("status") or {}).get("readyReplicas") or 0)


def readyz(runner: PodRunner, kv: ClusterView, ordinal: int) -> int:
    ip = pod_ip(runner.addresses.prefix(kv.namespace, kv.name), ordinal)
    try:
        return http_get(f"http://{ip}:{contract.SIDECAR_PORT}/readyz", timeout=2.0)[0]
    except OSError:
        return 0


def test_a_member_whose_readyz_fails_leaves_its_pod_not_ready_and_ready_replicas_short(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner) -> None:
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(3, workloadKind="StatefulSet", **FAST)
    kv.wait_healthy(0, 1, 2)
    wait_for(lambda: ready_replicas(kv) == 3, 60, "readyReplicas 3")
    kv.move_leader(0, 0, 1, 2)
    writer = Writer([kv.url(0), kv.url(1)], kv.tls)
    writer.start()
    victim = contract.pod_name(kv.name, VICTIM)
    pid, _ = running_store(runner, namespace, victim)
    try:
        wait_for(lambda: writer.ok > 20, 20, "the writer running")
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(lambda: readyz(runner, kv, VICTIM) == 503, 30, f"{victim}'s /readyz failing")
            wait_for(lambda: not pod_ready(kv, VICTIM), 30, f"{victim} NotReady")
            wait_for(lambda: ready_replicas(kv) == 2, 30, "readyReplicas 2 of 3")
            assert pod_ready(kv, 0) and pod_ready(kv, 1), "the serving members stay Ready"
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_for(lambda: pod_ready(kv, VICTIM), 60, f"{victim} Ready again once it serves")
        wait_for(lambda: ready_replicas(kv) == 3, 60, "readyReplicas 3 again")
        written = writer.ok
        wait_for(lambda: writer.ok > written + 20, 30, "writes flowing after the thaw")
    finally:
        writer.stop()
    assert_writes_flowed(writer, at_least=40)
    asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked, kv.tls))
