"""The whole stack: real operator, real workload controllers, real sidecars, real etcd.

kwok runs the pods' lifecycle in the API; `PodRunner` runs what kubelet would run in them
(the sidecar, then etcd once /startup answers; preStop GET /leave on deletion), on
loopback. Nothing stands in for a heartbeat: status, leader and scale-in plans come from
the members themselves, while a writer keeps putting keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from raftset import contract
from tools.devcluster.podrunner import PodRunner, pod_ip
from tests.harness.checker import Writer
from tests.harness.operator import Operator, install_crds
from tests.harness.view import ClusterView

pytestmark = pytest.mark.e2e

MAX_STALL_S = 10.0  # generous: a hand-off stalls writes for well under a second


@pytest.fixture(scope="module")
def operator(control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    install_crds(control_plane.kubeconfig)
    op = Operator(control_plane.kubeconfig, tmp_path_factory.mktemp("operator") / "operator.log",
                  default_kind="AdvancedStatefulSet")
    op.start()
    yield op
    op.stop()


@pytest.fixture
def runner(control_plane: Any, namespace: str, tmp_path: Path) -> Iterator[PodRunner]:
    with PodRunner(control_plane.kubeconfig, tmp_path / "runner", namespace=namespace) as pods:
        yield pods
    assert not pods.supervisor.procs, "the runner left processes behind"


def stack(kubeconfig: str, namespace: str, name: str, runner: PodRunner) -> ClusterView:
    """An EtcdCluster whose members the runner runs on loopback, so etcd itself can be asked."""
    return ClusterView(kubeconfig, contract.KIND_ETCD, name, namespace,
                       member_url=lambda ordinal: f"http://{pod_ip(runner.addresses.prefix(namespace, name), ordinal)}:2379")


FAST = {
    "sidecar": {"heartbeatIntervalSeconds": 2, "cleanIntervalSeconds": 2, "cleanGracePeriodSeconds": 120},
    "options": {"heartbeat-interval": "50", "election-timeout": "500"},
}

def test_advanced_statefulset_keeps_the_leader_through_a_real_scale_in(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner) -> None:
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(3, **FAST)  # the operator's default kind: AdvancedStatefulSet
    st = kv.wait_healthy(0, 1, 2)
    assert st["workloadKind"] == "AdvancedStatefulSet"
    leases = client.CoordinationV1Api(kv.api).list_namespaced_lease(
        namespace, label_selector=f"{contract.LABEL_HEARTBEAT}=true").items
    assert {lease.spec.holder_identity for lease in leases} == {"kv-0", "kv-1", "kv-2"}

    kv.scale(5)
    kv.wait_healthy(0, 1, 2, 3, 4)
    kv.move_leader(4, 0, 1, 2, 3, 4)  # the ordinal a builtin StatefulSet would delete first

    writer = Writer([kv.url(o) for o in (4, 0, 1, 2, 3)])
    writer.start()
    try:
        kv.scale(3)
        st = kv.wait_healthy(0, 1, 4)
    finally:
        writer.stop()
    assert kv.pods() == {"kv-0", "kv-1", "kv-4"}
    assert sorted(m.name for m in kv.members(0, 1, 4)) == ["kv-0", "kv-1", "kv-4"]
    assert kv.leader(0, 1, 4) == 4, "the leader's member must keep leading"
    assert st["leader"] == "kv-4" and st["reservedOrdinals"] == [2, 3]
    print(f"writer: {writer.ok} ok, {writer.failed} failed, longest stall {writer.longest_stall:.3f}s")
    assert writer.ok > 50, f"the writer barely wrote ({writer.ok})"
    assert writer.failed == 0, f"{writer.failed} writes failed: {writer.errors[-3:]}"
    assert writer.longest_stall < MAX_STALL_S, f"writes stalled {writer.longest_stall:.2f}s"


def test_builtin_statefulset_hands_leadership_off_before_its_pod_goes(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner) -> None:
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(3, workloadKind="StatefulSet", **FAST)
    kv.wait_healthy(0, 1, 2)
    kv.move_leader(2, 0, 1, 2)  # the ordinal the builtin StatefulSet deletes

    writer = Writer([kv.url(o) for o in (2, 0, 1)])
    writer.start()
    try:
        kv.scale(2)
        st = kv.wait_healthy(0, 1)
    finally:
        writer.stop()
    assert kv.pods() == {"kv-0", "kv-1"}
    assert sorted(m.name for m in kv.members(0, 1)) == ["kv-0", "kv-1"]
    assert kv.leader(0, 1) is not None and st["leader"] in ("kv-0", "kv-1")
    print(f"writer: {writer.ok} ok, {writer.failed} failed, longest stall {writer.longest_stall:.3f}s")
    assert writer.ok > 50, f"the writer barely wrote ({writer.ok})"
    assert writer.failed == 0, f"{writer.failed} writes failed: {writer.errors[-3:]}"
    assert writer.longest_stall < MAX_STALL_S, f"writes stalled {writer.longest_stall:.2f}s"
