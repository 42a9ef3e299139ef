"""The whole stack: real operator, real workload controllers, real sidecars, real etcd.

kwok runs the pods' lifecycle in the API; `PodRunner` runs what kubelet would run in them
(the sidecar, then etcd once /startup answers; preStop GET /leave on deletion), on
loopback. Nothing stands in for a heartbeat: status, leader and scale-in plans come from
the members themselves, while a writer keeps putting keys.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from raftset import contract
from tools.devcluster.podrunner import PodRunner, pod_ip
from raftset.etcdclient import EtcdClientError, Member, MemberClient
from tests.harness.lab import Writer
from tests.harness.operator import Operator, api, kubectl, wait_for

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
STEP_TIMEOUT = 90
MAX_STALL_S = 10.0  # generous: a hand-off stalls writes for well under a second


@pytest.fixture(scope="module")
def operator(control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    kubectl(control_plane.kubeconfig, "apply", "--server-side", "-f", str(ROOT / "crds"))
    kubectl(control_plane.kubeconfig, "wait", "--for=condition=Established",
            f"crd/{contract.PLURAL_ETCD}.{contract.GROUP}", "--timeout=60s")
    op = Operator(control_plane.kubeconfig, tmp_path_factory.mktemp("operator") / "operator.log",
                  default_kind="AdvancedStatefulSet")
    op.start()
    yield op
    op.stop()


@pytest.fixture
def namespace(control_plane: Any) -> Iterator[str]:
    name = f"fs-{uuid.uuid4().hex[:8]}"
    kubectl(control_plane.kubeconfig, "create", "namespace", name)
    yield name
    kubectl(control_plane.kubeconfig, "delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def runner(control_plane: Any, namespace: str, tmp_path: Path) -> Iterator[PodRunner]:
    with PodRunner(control_plane.kubeconfig, tmp_path / "runner", namespace=namespace) as pods:
        yield pods
    assert not pods.supervisor.procs, "the runner left processes behind"


class Stack:
    """One EtcdCluster seen through the API and through its own etcd members."""

    def __init__(self, kubeconfig: str, namespace: str, name: str, runner: PodRunner) -> None:
        self.kubeconfig, self.namespace, self.name, self.runner = kubeconfig, namespace, name, runner
        self.api = api(kubeconfig)
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)

    def create(self, replicas: int, backend: str | None = None) -> None:
        spec: dict[str, Any] = {
            "replicas": replicas,
            "storage": {"ephemeral": True},
            "tls": {"provider": "disabled"},  # the runner serves plaintext on loopback only
            "sidecar": {"heartbeatIntervalSeconds": 2, "cleanIntervalSeconds": 2, "cleanGracePeriodSeconds": 120},
            "options": {"heartbeat-interval": "50", "election-timeout": "500"},
        }
        if backend:
            spec["workloadKind"] = backend
        body = {"apiVersion": contract.API_VERSION, "kind": contract.KIND_ETCD,
                "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
        kubectl(self.kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(body))

    def scale(self, replicas: int) -> None:
        kubectl(self.kubeconfig, "scale", f"etcdclusters/{self.name}", f"--replicas={replicas}",
                "-n", self.namespace)

    def status(self) -> dict[str, Any]:
        obj = self.custom.get_namespaced_custom_object(
            contract.GROUP, contract.VERSION, self.namespace, contract.PLURAL_ETCD, self.name)
        return obj.get("status") or {}

    def pods(self) -> set[str]:
        found = self.core.list_namespaced_pod(self.namespace, label_selector=f"{contract.LABEL_INSTANCE}={self.name}")
        return {p.metadata.name for p in found.items}

    def url(self, ordinal: int) -> str:
        return f"http://{pod_ip(self.runner.addresses.prefix(self.namespace, self.name), ordinal)}:2379"

    def members(self, *ordinals: int) -> list[Member]:
        async def first_answer() -> list[Member]:
            for ordinal in ordinals:
                try:
                    async with MemberClient(self.url(ordinal), timeout=3) as c:
                        return await c.member_list()
                except EtcdClientError:
                    continue
            raise AssertionError(f"no member of {ordinals} answered MemberList")
        return asyncio.run(first_answer())

    def leader(self, *ordinals: int) -> int | None:
        async def find() -> int | None:
            for ordinal in ordinals:
                try:
                    async with MemberClient(self.url(ordinal), timeout=3) as c:
                        if (await c.status()).is_leader:
                            return ordinal
                except EtcdClientError:
                    continue
            return None
        return asyncio.run(find())

    def wait_healthy(self, *ordinals: int) -> dict[str, Any]:
        """Status lists exactly these members, all healthy with a leader, and etcd agrees."""
        want = {contract.pod_name(self.name, o) for o in ordinals}

        def healthy() -> dict[str, Any] | None:
            st = self.status()
            members = st.get("members") or []
            ok = ({m["name"] for m in members} == want and all(m["healthy"] for m in members)
                  and st.get("leader") in want and self.pods() == want)
            if not ok:
                return None
            try:
                voting = {m.name for m in self.members(*ordinals) if m.started and not m.is_learner}
            except AssertionError:
                return None  # no member answers yet
            return st if voting == want else None
        return wait_for(healthy, STEP_TIMEOUT, f"members {sorted(want)} healthy with a leader")

    def move_leader(self, ordinal: int, *ordinals: int) -> None:
        async def target_id() -> int:
            async with MemberClient(self.url(ordinal), timeout=3) as c:
                return (await c.status()).member_id

        async def move(current: int, target: int) -> None:
            async with MemberClient(self.url(current), timeout=5) as c:
                await c.move_leader(target)

        target = asyncio.run(target_id())

        def moved() -> bool:
            current = self.leader(*ordinals)
            if current is not None and current != ordinal:
                asyncio.run(move(current, target))
            return current == ordinal
        wait_for(moved, 30, f"etcd leadership on ordinal {ordinal}", interval=0.5)
        wait_for(lambda: self.status().get("leader") == contract.pod_name(self.name, ordinal), 30,
                 f"status.leader {contract.pod_name(self.name, ordinal)} from the heartbeats")


def test_advanced_statefulset_keeps_the_leader_through_a_real_scale_in(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner) -> None:
    kv = Stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(3)  # the operator's default kind: AdvancedStatefulSet
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
    kv = Stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(3, backend="StatefulSet")
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
