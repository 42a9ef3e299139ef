"""The whole stack: real operator, real workload controllers, real sidecars, real etcd.

kwok runs the pods' lifecycle in the API; `PodRunner` runs what kubelet would run in them
(the sidecar, then etcd once /startup answers; preStop GET /leave on deletion), on
loopback. Nothing stands in for a heartbeat: status, leader and scale-in plans come from
the members themselves, while a writer keeps putting keys.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from raftset import contract
from raftset.sidecar.io.etcdclient import EtcdClientError, MemberClient
from tests.harness import elections, engines
from tests.harness.checker import Writer, check
from tests.harness.cli import PLUGIN
from tests.harness.elections import Election
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import Operator, kubectl, wait_for
from tests.harness.podwatch import PodChange, PodWatch, deletions
from tests.harness.view import ClusterView
from tools.devcluster.podrunner import PodRunner, pod_ip

pytestmark = pytest.mark.e2e

MAX_STALL_S = 10.0  # generous: a hand-off stalls writes for well under a second
# Where a leader hands leadership over, the writer retries a write within this deadline, as a
# client would: etcd drops the proposals in flight while it transfers leadership (the
# follower that forwarded one hears nothing back: docs/benchmarks.md, "Why (a) and (b) fail
# requests"), and a retried put is a new key, so the check stays exact.
HAND_OFF_DEADLINE_S = 2.0


OPERATOR_DEFAULT_KIND = "AdvancedStatefulSet"  # the operator fixture's (tests/conftest.py)


def assert_writes_flowed(writer: Writer, *, at_least: int) -> None:
    """The writer kept writing: enough acknowledged puts, none failed, no stall past MAX_STALL_S."""
    print(f"writer: {writer.ok} ok, {writer.failed} failed, {len(writer.errors)} attempts refused, "
          f"longest stall {writer.longest_stall:.3f}s")
    assert writer.ok > at_least, f"the writer barely wrote ({writer.ok})"
    assert writer.failed == 0, f"{writer.failed} writes failed: {writer.errors[-3:]}"
    assert writer.longest_stall < MAX_STALL_S, f"writes stalled {writer.longest_stall:.2f}s"


def stack(kubeconfig: str, namespace: str, name: str, runner: PodRunner, scheme: str = "http") -> ClusterView:
    """An EtcdCluster whose members the runner runs on loopback, so etcd itself can be asked
    (`scheme` https: they serve TLS, asked with the view's `tls`)."""
    return ClusterView(kubeconfig, contract.KIND_ETCD, name, namespace, member_url=lambda ordinal:
                       f"{scheme}://{pod_ip(runner.addresses.prefix(namespace, name), ordinal)}:2379")


FAST = {
    "sidecar": {"heartbeatIntervalSeconds": 2, "cleanIntervalSeconds": 2, "cleanGracePeriodSeconds": 120},
    "options": {"heartbeat-interval": "50", "election-timeout": "500"},
}
# For the tests that count elections: etcd's 100 ms heartbeat with a 5 s election timeout. A
# 500 ms timeout on a busy 2-core runner calls elections nobody asked for; 5 s leaves the ones
# the product causes. Every hand-off is a MoveLeader, which does not wait for the timeout. The
# elections are read from the members' logs (tests/harness/elections.py), so a failure says
# which were hand-offs and which were not: an extra leader change seen in a roll this way was
# a leader stepping down because both followers were down at once (issue 30, bug 2).
ELECTIONS_COUNTED = {"sidecar": FAST["sidecar"], "options": {"heartbeat-interval": "100", "election-timeout": "5000"}}

# Scale-in on both backends with real members of the older etcd builds (the test id names it). The
# default build's is the real tier's: real pods on real nodes, the leader on the highest ordinal, a
# writer (tests/real/test_operator_tls.py: the 3 -> 5 -> 3 and the Advanced StatefulSet's 5 -> 3).
# The default build (the `etcd` fixture, tests/e2e/conftest.py) runs everything else in this module,
# and its id names it too.
OLDER_BUILDS = pytest.mark.parametrize("etcd", [e for e in engines.ETCDS if e.label != engines.DEFAULT.label],
                                       ids=lambda e: e.label)


@OLDER_BUILDS
def test_advanced_statefulset_keeps_the_leader_through_a_real_scale_in(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, etcd: EngineUnderTest) -> None:
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(3, version=etcd.version, **FAST)  # the operator's default kind: AdvancedStatefulSet
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
    assert st["version"] == etcd.version
    assert_writes_flowed(writer, at_least=50)
    asyncio.run(check([kv.url(o) for o in (0, 1, 4)], writer.acked))


def test_the_operator_killed_mid_scale_in_resumes_it_keeping_the_leader_and_every_write(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, etcd: EngineUnderTest) -> None:
    """SIGKILLed between the two steps of a 5 -> 3 scale-in, the operator's next replica reads the step the
    killed one wrote on the workload and finishes it: the leader on the highest ordinal keeps leading,
    each member is removed once, and no write fails."""
    kv = stack(control_plane.kubeconfig, namespace, "killed", runner)
    kv.create(5, version=etcd.version, **FAST)
    kv.wait_healthy(0, 1, 2, 3, 4)
    kv.move_leader(4, 0, 1, 2, 3, 4)
    writer = Writer([kv.url(o) for o in (4, 0, 1, 2, 3)])
    writer.start()
    try:
        kv.scale(3)
        first = wait_for(lambda: (spec := kv.workload()["spec"])["replicas"] == 4 and spec, 120,
                         "the first scale-in step on the workload")
        operator.kill()
        assert first.get("reserveOrdinals") == [3], first
        operator.start()
        st = kv.wait_healthy(0, 1, 4)
    finally:
        writer.stop()
        if not operator.alive():
            operator.start()  # the module's other tests share it
    assert kv.pods() == {"killed-0", "killed-1", "killed-4"}
    assert sorted(m.name for m in kv.members(0, 1, 4)) == ["killed-0", "killed-1", "killed-4"]
    assert kv.leader(0, 1, 4) == 4, "the leader's member must keep leading"
    assert st["leader"] == "killed-4" and st["reservedOrdinals"] == [2, 3]
    scaled_in = [m for reason, m in kv.events() if reason == "ScalingIn"]
    assert len(scaled_in) == len(set(scaled_in)), f"a member narrated twice: {scaled_in}"
    assert_writes_flowed(writer, at_least=50)
    asyncio.run(check([kv.url(o) for o in (0, 1, 4)], writer.acked))


@OLDER_BUILDS
def test_builtin_statefulset_hands_leadership_off_before_its_pod_goes(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, etcd: EngineUnderTest) -> None:
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(3, workloadKind="StatefulSet", version=etcd.version, **FAST)
    kv.wait_healthy(0, 1, 2)
    kv.move_leader(2, 0, 1, 2)  # the ordinal the builtin StatefulSet deletes

    writer = Writer([kv.url(o) for o in (2, 0, 1)], deadline=HAND_OFF_DEADLINE_S)
    writer.start()
    try:
        kv.scale(2)
        st = kv.wait_healthy(0, 1)
    finally:
        writer.stop()
    assert kv.pods() == {"kv-0", "kv-1"}
    assert sorted(m.name for m in kv.members(0, 1)) == ["kv-0", "kv-1"]
    assert kv.leader(0, 1) is not None and st["leader"] in ("kv-0", "kv-1")
    assert st["version"] == etcd.version
    assert_writes_flowed(writer, at_least=50)
    asyncio.run(check([kv.url(o) for o in (0, 1)], writer.acked))


# The builtin StatefulSet's roll is the real tier's: the upgrade 3.6 -> 3.7 on real pods under a writer,
# leader last (tests/real/test_operator_tls.py).
@pytest.mark.parametrize("backend", ["AdvancedStatefulSet"])
def test_a_template_change_rolls_followers_first_and_the_leader_last(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, backend: str,
        etcd: EngineUnderTest) -> None:
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    # Claims of the plane's default StorageClass: a restart keeps its data (an emptyDir would not).
    roll_under_writes(kv, namespace, control_plane.kubeconfig, backend, etcd.version, runner.workdir / "logs")


def store_elections(logs: Path, namespace: str, cluster: str) -> list[Election]:
    """The elections the cluster's etcd members logged (the pod runner's `<namespace>.<pod>.<uid>.store.log`)."""
    return elections.logged(sorted(logs.glob(f"{namespace}.{cluster}-*.store.log")))


@dataclass(frozen=True)
class Roll:
    """One rolling change as the members saw it: the highest term and the leader's ordinal at its
    start and at its end."""

    what: str
    term: int
    leader: int | None
    end_term: int = 0
    end_leader: int | None = None

    def ended(self, term: int, leader: int | None) -> Roll:
        return dataclasses.replace(self, end_term=term, end_leader=leader)

    def one_hand_off_by_its_leader(self, found: list[Election], ids: dict[str, int]) -> bool:
        """One term change, and its election the hand-off of the leader the roll started with
        (rolled last, it hands off once; a leader rolled earlier would hand off again)."""
        by = [e.handed_off_by for e in elections.between(found, self.term, self.end_term)]
        return self.end_term - self.term == 1 and by == [f"{ids[f'kv-{self.leader}']:x}"]

    def report(self, found: list[Election], ids: dict[str, int]) -> str:
        names = {f"{member:x}": name for name, member in ids.items()}
        def name(member: str) -> str:
            return names.get(member, member)
        seen = [f"term {e.term}: {name(e.leader)} ({e.why(name)})"
                for e in elections.between(found, self.term, self.end_term)]
        return (f"{self.what}: term {self.term} -> {self.end_term}, leader kv-{self.leader} -> kv-{self.end_leader}; "
                f"elections logged: {'; '.join(seen) or 'none'}")


def one_out_at_a_time(pods: PodWatch, members: tuple[str, ...]) -> list[tuple[PodChange, dict[str, PodChange]]]:
    """The pods' deletions, each checked to have found every other member's pod Ready: a roll takes
    one member out of the client Service at a time (two out of three is a lost quorum)."""
    assert pods.errors == []
    steps = deletions(pods.changes)
    for change, state in steps:
        others = {name: state[name].ready for name in members if name != change.name}
        assert all(others.values()), f"{change.name} deleted while {others}"
    return steps


def roll_under_writes(kv: ClusterView, namespace: str, kubeconfig: str, backend: str, version: str,
                      logs: Path) -> None:
    kv.create(3, workloadKind=backend, version=version, storage={"size": "1Gi"}, **ELECTIONS_COUNTED)
    kv.wait_healthy(0, 1, 2)
    kv.move_leader(2, 0, 1, 2)  # the ordinal a controller-driven roll restarts first
    ids = {m.name: m.id for m in kv.members(0, 1, 2)}
    roll = Roll("the template roll", kv.raft_term(0, 1, 2), 2)
    before = {p.metadata.name: p.metadata.creation_timestamp for p in kv.pod_objects()}

    writer = Writer([kv.url(o) for o in (0, 1, 2)], deadline=HAND_OFF_DEADLINE_S)
    writer.start()
    try:
        with PodWatch(kv.core, namespace, kv.name) as pods:
            kubectl(kubeconfig, "patch", f"etcdclusters/{kv.name}", "-n", namespace, "--type=merge",
                    "-p", json.dumps({"spec": {"options": {"snapshot-count": "20000"}}}))
            wait_for(lambda: all(p.metadata.creation_timestamp > before[p.metadata.name] for p in kv.pod_objects())
                     and len(kv.pod_objects()) == 3, 240, "every pod re-created on the new template")
            kv.wait_healthy(0, 1, 2)
    finally:
        writer.stop()
    assert [change.name for change, _ in one_out_at_a_time(pods, ("kv-0", "kv-1", "kv-2"))] == \
        ["kv-1", "kv-0", "kv-2"]
    restarted = [p.metadata.name for p in sorted(kv.pod_objects(), key=lambda p: p.metadata.creation_timestamp)]
    assert restarted == ["kv-1", "kv-0", "kv-2"], "followers first, highest ordinal first, the leader last"
    assert {m.name: m.id for m in kv.members(0, 1, 2)} == ids, "a restart keeps every member"
    leader = kv.leader(0, 1, 2)
    roll = roll.ended(kv.raft_term(0, 1, 2), leader)
    report = roll.report(store_elections(logs, namespace, kv.name), ids)
    print(report)
    assert roll.one_hand_off_by_its_leader(store_elections(logs, namespace, kv.name), ids), \
        f"one leader change: the leader's own hand-off; {report}"
    assert leader in (0, 1), "leadership went to a follower and stayed there"
    # The status follows the members' records: the old pod's record may lead it for a beat.
    wait_for(lambda: kv.status().get("leader") == f"kv-{leader}", 30, "status.leader from the new records")
    rolled = [m for reason, m in kv.events() if reason == "RollingMember"]
    assert len(rolled) == 3, rolled
    assert_writes_flowed(writer, at_least=50)
    asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked))


# The upgrade path through every supported etcd build, oldest first; the test id names it.
UPGRADE_PATH = tuple(sorted((e.version for e in engines.ETCDS), key=lambda v: tuple(map(int, v.split(".")))))


# On the builtin StatefulSet, the real tier's upgrade (3.6 -> 3.7 on real pods, leader last, a writer).
@pytest.mark.parametrize("path", [UPGRADE_PATH], ids=lambda p: "etcd-" + "-".join(p))
@pytest.mark.parametrize("backend", ["AdvancedStatefulSet"])
def test_an_upgrade_3_5_to_3_7_goes_one_minor_at_a_time_leader_last(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, backend: str,
        path: tuple[str, ...]) -> None:
    assert path == ("3.5.35", "3.6.16", "3.7.3"), f"the test's name and its 3.5 WAL note say 3.5 to 3.7: {path}"
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    upgrade_under_writes(kv, namespace, control_plane.kubeconfig, backend, path, runner.workdir / "logs")


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


def upgrade_under_writes(kv: ClusterView, namespace: str, kubeconfig: str, backend: str,
                         path: tuple[str, ...], logs: Path) -> None:
    # etcd 3.7 cannot apply the v2 entries 3.5 left in the WAL ("unmarshal should never fail"):
    # a raft snapshot on 3.6 must be past them first. A low snapshot-count takes one within the
    # writes of the 3.6 phase (docs/engines.md, "Upgrading a cluster that ran 3.5").
    options = {**ELECTIONS_COUNTED["options"], "snapshot-count": "100"}
    first, *later = path
    kv.create(3, workloadKind=backend, version=first, storage={"size": "1Gi"},
              sidecar=ELECTIONS_COUNTED["sidecar"], options=options)
    kv.wait_healthy(0, 1, 2)
    wait_versions(kv, first, 0, 1, 2)
    ids = {m.name: m.id for m in kv.members(0, 1, 2)}
    writer = Writer([kv.url(o) for o in (0, 1, 2)], deadline=HAND_OFF_DEADLINE_S)
    writer.start()
    rolls: list[Roll] = []
    try:
        with PodWatch(kv.core, namespace, kv.name) as pods:
            for version in later:
                roll = Roll(f"the roll to {version}", kv.raft_term(0, 1, 2), kv.leader(0, 1, 2))
                kubectl(kubeconfig, "patch", f"etcdclusters/{kv.name}", "-n", namespace, "--type=merge",
                        "-p", json.dumps({"spec": {"version": version}}))
                wait_for(lambda v=version: kv.status().get("version") == v, 300, f"every member on {version}")
                kv.wait_healthy(0, 1, 2)
                wait_versions(kv, version, 0, 1, 2)
                # Counted from here, when every member runs `version`: writes during the roll may
                # precede the last member's restart, and its snapshot must come after it.
                rolled = writer.ok
                wait_for(lambda: writer.ok > rolled + 400, 120, "a snapshot's worth of writes on every member")
                rolls.append(roll.ended(kv.raft_term(0, 1, 2), kv.leader(0, 1, 2)))
    finally:
        writer.stop()
    restarts = [(change.name, change.uid[:8]) for change, _ in one_out_at_a_time(pods, ("kv-0", "kv-1", "kv-2"))]
    if len(restarts) != 3 * len(later):  # who deleted the extra pod: the operator's and the workload controller's word
        found = kv.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={kv.name}").items
        told = [(e.involved_object.kind, e.reason, e.message) for e in found]
        raise AssertionError(f"each roll restarts each once: {restarts}; events {told}")
    assert {m.name: m.id for m in kv.members(0, 1, 2)} == ids, "an upgrade keeps every member"
    found = store_elections(logs, namespace, kv.name)
    report = "\n".join(roll.report(found, ids) for roll in rolls)
    print(report)
    for roll in rolls:
        assert roll.one_hand_off_by_its_leader(found, ids), f"one leader change per roll, the leader's own " \
                                                            f"hand-off; the rolls:\n{report}"
    assert_writes_flowed(writer, at_least=100)
    asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked))


# A power loss (every store and sidecar killed together) is the real tier's: every node's kubelet,
# containerd and containers killed on real nodes (tests/real/test_operator_tls.py, lights-out).
@pytest.mark.parametrize("backend", ["StatefulSet", "AdvancedStatefulSet"])
def test_lights_out_the_cluster_comes_back_by_itself(control_plane: Any, operator: Operator, namespace: str,
                                                     runner: PodRunner, backend: str, etcd: EngineUnderTest) -> None:
    """Every member stops at once; with their volumes they re-form with the same IDs and every
    acknowledged write. Parallel pod management starts them together, so no pod waits for a
    readiness that needs a leader (docs/operations.md, "Lights-out")."""
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(3, workloadKind=backend, version=etcd.version, storage={"size": "1Gi"}, **FAST)
    kv.wait_healthy(0, 1, 2)
    claims = kv.bound_claims()
    assert set(claims) == {f"data-kv-{o}" for o in (0, 1, 2)}, "each member's data on a provisioned volume"
    ids = {m.name: m.id for m in kv.members(0, 1, 2)}
    writer = Writer([kv.url(o) for o in (0, 1, 2)])
    writer.start()
    wait_for(lambda: writer.ok > 100, 60, "the writer running")
    kubectl(control_plane.kubeconfig, "delete", "pods", "-n", namespace, "--wait=false",
            "-l", f"{contract.LABEL_INSTANCE}={kv.name}")
    wait_for(lambda: writer.failed > 0, 60, "the outage seen by the writer (a lights-out with no failed write was no outage)")
    st = kv.wait_healthy(0, 1, 2)
    written = writer.ok
    wait_for(lambda: writer.ok > written + 20, 60, "writes acknowledged again")  # the stall ends here
    writer.stop()
    assert {m.name: m.id for m in kv.members(0, 1, 2)} == ids, "the same members, not new ones"
    assert kv.bound_claims() == claims, "the same volumes"
    assert st["leader"] in kv.pod_names(0, 1, 2)
    verdict = asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked))
    print(f"lights-out (pods deleted): {verdict.acknowledged} acknowledged writes read back, "
          f"{writer.failed} failed during the outage, writes stalled {writer.longest_stall:.1f}s")


@pytest.mark.parametrize(("backend", "policy"), [("StatefulSet", "Manual"), ("AdvancedStatefulSet", "Automatic")])
def test_quorum_loss_recovered_from_the_survivor(control_plane: Any, operator: Operator, namespace: str,
                                                 runner: PodRunner, backend: str, policy: str,
                                                 etcd: EngineUnderTest) -> None:
    """Two of three pods lose their node and disk at once. The operator reports QuorumLost with
    the survivor's indexes; under Manual it waits for `recover-quorum=auto`, under Automatic for
    its grace period; then the survivor restarts alone and the others rejoin, under the same
    cluster name, with every acknowledged write (docs/operations.md, "Disaster recovery")."""
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(3, workloadKind=backend, version=etcd.version, storage={"size": "1Gi"},
              recovery={"quorumLoss": policy, "quorumLossGracePeriodSeconds": 5}, **FAST)
    kv.wait_healthy(0, 1, 2)
    if policy == "Manual":  # asked while the cluster has quorum: refused, nothing changed
        kubectl(control_plane.kubeconfig, "annotate", f"etcdclusters/{kv.name}", "-n", namespace,
                f"{contract.ANNOTATION_RECOVER_QUORUM}=auto")
        refusal = wait_for(lambda: [m for r, m in kv.events() if r == "RecoveryRefused"], 60, "the refusal")[0]
        assert "has quorum" in refusal, refusal
        wait_for(lambda: contract.ANNOTATION_RECOVER_QUORUM not in (kv.obj()["metadata"].get("annotations") or {}),
                 30, "the refused request removed")
        assert contract.ANNOTATION_QUORUM_RECOVERY not in (kv.workload()["metadata"].get("annotations") or {})
    # The writer runs through the loss and the recovery, on kv-0 only: a put the survivor answered is in
    # its own log, so every acknowledged write must read back, those of the recovered cluster too.
    writer = Writer([kv.url(0)])
    writer.start()
    asked: subprocess.Popen[str] | None = None
    try:
        wait_for(lambda: writer.ok > 100, 60, "the writer running")
        survivor_id = next(m.id for m in kv.members(0, 1, 2) if m.name == "kv-0")
        core = client.CoreV1Api(kv.api)
        for name in ("kv-1", "kv-2"):  # both at once: their nodes and disks are gone
            core.delete_namespaced_pod(name, namespace)
            runner.lose(namespace, name)
        lost = wait_for(lambda: [m for r, m in kv.events() if r == "QuorumLost"], 90, "the QuorumLost Event")[0]
        assert "kv-0" in lost and "committed" in lost and "applied" in lost, lost
        acked_at_loss = writer.ok
        if policy == "Manual":
            # The Event is told before the status that shows it is patched (docs/architecture.md, "narrate").
            wait_for(lambda: kv.condition("QuorumLost").get("reason") == "QuorumLost", 30,
                     "the QuorumLost condition after its Event")
            assert contract.ANNOTATION_QUORUM_RECOVERY not in (kv.workload()["metadata"].get("annotations") or {}), \
                "nothing happens until a person asks"
            # The person asks with the plugin (issue 31), which follows the recovery to its end.
            asked = subprocess.Popen([PLUGIN, "--kubeconfig", control_plane.kubeconfig, "-n", namespace, "-o", "json",
                                      "recover-quorum", kv.name, "--yes", "--timeout", "400"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: kv.condition("QuorumLost").get("reason") in ("Recovering", "Rejoining", "Recovered"), 60,
                 "the recovery started")
        start = time.monotonic()
        wait_for(lambda: kv.condition("QuorumLost").get("reason") in ("Rejoining", "Recovered"), 120,
                 "writes accepted again")
        writable = time.monotonic() - start
        wait_for(lambda: kv.condition("QuorumLost").get("reason") == "Recovered", 240, "every member votes again")
        full = time.monotonic() - start
        kv.wait_healthy(0, 1, 2)
        wait_for(lambda: writer.ok > acked_at_loss + 50, 60, "writes acknowledged by the recovered cluster")
        if asked is not None:
            said, progress = asked.communicate(timeout=120)
            assert asked.returncode == 0, f"kubectl raftset recover-quorum exited {asked.returncode}:\n{progress}{said}"
            assert json.loads(said)["outcome"] == "Recovered", said
            assert "kv-0" in progress, f"the survivor was shown before the request:\n{progress}"
    finally:
        writer.stop()
        if asked is not None and asked.poll() is None:
            asked.kill()
    assert writer.failed > 0, "no write failed: the loss was no outage"
    reasons = [r for r, _ in kv.events()]
    for reason in ("QuorumLost", "QuorumRecoveryStarted", "QuorumRecovered"):
        assert reason in reasons, reasons
    assert contract.ANNOTATION_RECOVER_QUORUM not in (kv.obj()["metadata"].get("annotations") or {})
    assert contract.ANNOTATION_QUORUM_RECOVERY not in (kv.workload()["metadata"].get("annotations") or {})
    members = {m.name: m.id for m in kv.members(0, 1, 2)}
    assert members["kv-0"] == survivor_id and len(members) == 3
    verdict = asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked))
    print(f"quorum loss ({backend}, {policy}, 1 survivor of 3, through the operator): recovery start -> writable "
          f"{writable:.1f} s, -> full size {full:.1f} s; {verdict.acknowledged} acknowledged writes read back")


@pytest.mark.parametrize("backend", ["StatefulSet", "AdvancedStatefulSet"])
def test_the_leader_is_replaced_on_request_and_the_operator_narrates_each_step(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, backend: str,
        etcd: EngineUnderTest) -> None:
    """`kubectl annotate pod kv-1 raftset.dev/replace=true` on the leader: it hands off, leaves Raft,
    joins again as a new member on fresh data; status and Events tell each step; writes keep flowing."""
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(3, workloadKind=backend, version=etcd.version, **FAST)
    kv.wait_healthy(0, 1, 2)
    kv.move_leader(1, 0, 1, 2)
    old = {m.name: m.id for m in kv.members(0, 1, 2)}["kv-1"]
    writer = Writer([kv.url(o) for o in (0, 2, 1)], deadline=HAND_OFF_DEADLINE_S)
    writer.start()
    phases: set[str] = set()

    def replaced() -> bool:
        rows = kv.status().get("replacements") or []
        phases.update(step for r in rows for step in r.get("steps", []))
        pod = client.CoreV1Api(kv.api).read_namespaced_pod("kv-1", namespace)
        annotations = pod.metadata.annotations or {}
        voters = {m.name: m.id for m in kv.members(0, 2) if m.started and not m.is_learner}
        return (not rows and contract.ANNOTATION_REPLACE not in annotations
                and voters.get("kv-1") not in (None, old) and len(voters) == 3)

    try:
        wait_for(lambda: writer.ok > 50, 60, "the writer running")
        kubectl(control_plane.kubeconfig, "annotate", "pod", "-n", namespace, "kv-1",
                f"{contract.ANNOTATION_REPLACE}=true")
        wait_for(replaced, 180, "kv-1 replaced by a new voting member, the request cleared")
        kv.wait_healthy(0, 1, 2)
        written = writer.ok
        wait_for(lambda: writer.ok > written + 20, 30, "writes flowing after the replacement")
    finally:
        writer.stop()
    new = {m.name: m.id for m in kv.members(0, 1, 2)}["kv-1"]
    assert new != old
    assert {"HandingOff", "Removing"} <= phases, phases
    reasons = [reason for reason, _ in kv.events()]
    for reason in ("ReplaceHandingOff", "ReplaceRemoving", "Replaced"):
        assert reason in reasons, reasons
    assert_writes_flowed(writer, at_least=50)
    asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked))
