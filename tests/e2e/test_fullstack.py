"""The whole stack: real operator, real workload controllers, real sidecars, real etcd.

kwok runs the pods' lifecycle in the API; `PodRunner` runs what kubelet would run in them
(the sidecar, then etcd once /startup answers; preStop GET /leave on deletion), on
loopback. Nothing stands in for a heartbeat: status, leader and scale-in plans come from
the members themselves, while a writer keeps putting keys.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from raftset import contract
from raftset.etcdclient import EtcdClientError, MemberClient
from tests.harness.checker import Writer, check
from tests.harness.operator import Operator, install_crds, kubectl, wait_for
from tests.harness.view import ClusterView
from tools.devcluster.podrunner import PodRunner, pod_ip

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


def assert_writes_flowed(writer: Writer, *, at_least: int) -> None:
    """The writer kept writing: enough acknowledged puts, none failed, no stall past MAX_STALL_S."""
    print(f"writer: {writer.ok} ok, {writer.failed} failed, longest stall {writer.longest_stall:.3f}s")
    assert writer.ok > at_least, f"the writer barely wrote ({writer.ok})"
    assert writer.failed == 0, f"{writer.failed} writes failed: {writer.errors[-3:]}"
    assert writer.longest_stall < MAX_STALL_S, f"writes stalled {writer.longest_stall:.2f}s"


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
    assert_writes_flowed(writer, at_least=50)


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
    assert_writes_flowed(writer, at_least=50)


@pytest.mark.parametrize("backend", ["StatefulSet", "AdvancedStatefulSet"])
def test_a_template_change_rolls_followers_first_and_the_leader_last(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, backend: str) -> None:
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    volumes = kv.prebind_volumes(0, 1, 2)  # a restart keeps its data (an emptyDir would not)
    try:
        roll_under_writes(kv, namespace, control_plane.kubeconfig, backend)
    finally:
        for name in volumes:
            client.CoreV1Api(kv.api).delete_persistent_volume(name)


def roll_under_writes(kv: ClusterView, namespace: str, kubeconfig: str, backend: str) -> None:
    kv.create(3, workloadKind=backend, storage={"size": "1Gi"}, **FAST)
    kv.wait_healthy(0, 1, 2)
    kv.move_leader(2, 0, 1, 2)  # the ordinal a controller-driven roll restarts first
    ids = {m.name: m.id for m in kv.members(0, 1, 2)}
    term = kv.raft_term(0, 1, 2)
    before = {p.metadata.name: p.metadata.creation_timestamp for p in kv.pod_objects()}

    writer = Writer([kv.url(o) for o in (0, 1, 2)])
    writer.start()
    try:
        kubectl(kubeconfig, "patch", f"etcdclusters/{kv.name}", "-n", namespace, "--type=merge",
                "-p", json.dumps({"spec": {"options": {**FAST["options"], "snapshot-count": "20000"}}}))
        wait_for(lambda: all(p.metadata.creation_timestamp > before[p.metadata.name] for p in kv.pod_objects())
                 and len(kv.pod_objects()) == 3, 240, "every pod re-created on the new template")
        kv.wait_healthy(0, 1, 2)
    finally:
        writer.stop()
    restarted = [p.metadata.name for p in sorted(kv.pod_objects(), key=lambda p: p.metadata.creation_timestamp)]
    assert restarted == ["kv-1", "kv-0", "kv-2"], "followers first, highest ordinal first, the leader last"
    assert {m.name: m.id for m in kv.members(0, 1, 2)} == ids, "a restart keeps every member"
    assert kv.raft_term(0, 1, 2) - term == 1, "one leader change: the leader's own hand-off"
    leader = kv.leader(0, 1, 2)
    assert leader in (0, 1), "leadership went to a follower and stayed there"
    # The status follows the members' records: the old pod's record may lead it for a beat.
    wait_for(lambda: kv.status().get("leader") == f"kv-{leader}", 30, "status.leader from the new records")
    rolled = [m for reason, m in kv.events() if reason == "RollingMember"]
    assert len(rolled) == 3, rolled
    assert_writes_flowed(writer, at_least=50)


@pytest.mark.parametrize("backend", ["StatefulSet", "AdvancedStatefulSet"])
def test_an_upgrade_3_5_to_3_7_goes_one_minor_at_a_time_leader_last(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, backend: str) -> None:
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    volumes = kv.prebind_volumes(0, 1, 2)
    try:
        upgrade_under_writes(kv, namespace, control_plane.kubeconfig, backend)
    finally:
        for name in volumes:
            client.CoreV1Api(kv.api).delete_persistent_volume(name)


def wait_versions(kv: ClusterView, version: str, *ordinals: int) -> None:
    """Every one of these members answers Status with `version`."""
    async def ask() -> set[str | None]:
        found: set[str | None] = set()
        for ordinal in ordinals:
            try:
                async with MemberClient(kv.url(ordinal), timeout=3) as c:
                    found.add((await c.status()).version)
            except EtcdClientError:
                found.add(None)
        return found
    wait_for(lambda: asyncio.run(ask()) == {version}, 60, f"members {ordinals} serving on {version}")


def upgrade_under_writes(kv: ClusterView, namespace: str, kubeconfig: str, backend: str) -> None:
    # etcd 3.7 cannot apply the v2 entries 3.5 left in the WAL ("unmarshal should never fail"):
    # a raft snapshot on 3.6 must be past them first. A low snapshot-count takes one within the
    # writes of the 3.6 phase (docs/engines.md, "Upgrading a cluster that ran 3.5").
    options = {**FAST["options"], "snapshot-count": "100"}
    kv.create(3, workloadKind=backend, version="3.5.35", storage={"size": "1Gi"},
              sidecar=FAST["sidecar"], options=options)
    kv.wait_healthy(0, 1, 2)
    wait_versions(kv, "3.5.35", 0, 1, 2)
    ids = {m.name: m.id for m in kv.members(0, 1, 2)}
    writer = Writer([kv.url(o) for o in (0, 1, 2)])
    writer.start()
    leader_changes = []
    try:
        for version in ("3.6.16", "3.7.3"):
            term = kv.raft_term(0, 1, 2)
            kubectl(kubeconfig, "patch", f"etcdclusters/{kv.name}", "-n", namespace, "--type=merge",
                    "-p", json.dumps({"spec": {"version": version}}))
            wait_for(lambda v=version: kv.status().get("version") == v, 300, f"every member on {version}")
            kv.wait_healthy(0, 1, 2)
            wait_for(lambda: writer.ok > 400 * len(leader_changes) + 400, 120, "a snapshot's worth of writes")
            wait_versions(kv, version, 0, 1, 2)
            leader_changes.append(kv.raft_term(0, 1, 2) - term)
    finally:
        writer.stop()
    assert {m.name: m.id for m in kv.members(0, 1, 2)} == ids, "an upgrade keeps every member"
    assert leader_changes == [1, 1], "one leader change per roll: the leader's own hand-off"
    assert_writes_flowed(writer, at_least=100)


@pytest.mark.parametrize(("backend", "outage"), [
    ("StatefulSet", "pods-deleted"), ("AdvancedStatefulSet", "pods-deleted"), ("StatefulSet", "power-loss"),
])
def test_lights_out_the_cluster_comes_back_by_itself(control_plane: Any, operator: Operator, namespace: str,
                                                     runner: PodRunner, backend: str, outage: str) -> None:
    """Every member stops at once; with their volumes they re-form with the same IDs and every
    acknowledged write. Parallel pod management starts them together, so no pod waits for a
    readiness that needs a leader (docs/operations.md, "Lights-out")."""
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    volumes = kv.prebind_volumes(0, 1, 2)
    try:
        kv.create(3, workloadKind=backend, storage={"size": "1Gi"}, **FAST)
        kv.wait_healthy(0, 1, 2)
        ids = {m.name: m.id for m in kv.members(0, 1, 2)}
        writer = Writer([kv.url(o) for o in (0, 1, 2)])
        writer.start()
        wait_for(lambda: writer.ok > 100, 60, "the writer running")
        if outage == "pods-deleted":
            kubectl(control_plane.kubeconfig, "delete", "pods", "-n", namespace, "--wait=false",
                    "-l", f"{contract.LABEL_INSTANCE}={kv.name}")
        else:  # every store and sidecar SIGKILLed together; kubelet restarts the containers
            for proc in list(runner.supervisor.procs):
                if f".{kv.name}-" in proc.name:
                    runner.supervisor.kill(proc)
        wait_for(lambda: writer.failed > 0 or writer.ok > 10_000, 60, "the outage seen by the writer")
        st = kv.wait_healthy(0, 1, 2)
        written = writer.ok
        wait_for(lambda: writer.ok > written + 20, 60, "writes acknowledged again")  # the stall ends here
        writer.stop()
        assert {m.name: m.id for m in kv.members(0, 1, 2)} == ids, "the same members, not new ones"
        assert st["leader"] in kv.pod_names(0, 1, 2)
        verdict = asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked))
        print(f"lights-out ({outage}): {verdict.acknowledged} acknowledged writes read back, "
              f"{writer.failed} failed during the outage, writes stalled {writer.longest_stall:.1f}s")
    finally:
        for name in volumes:
            client.CoreV1Api(kv.api).delete_persistent_volume(name)
