"""The robustness campaign (issue 27, item 4): an operator action, a fault injected in its middle,
on the real control plane with real members, under recorded client traffic. Every run ends with
the linearizability verdict (lincheck), the watch checks, the acknowledged-write checker and the
identity checks. The cases are tests/harness/campaign.py's table: `make test` runs its seeded
short subset, `make robustness` (RAFTSET_CAMPAIGN=all) every case, saving each result for
docs/robustness.md's table. One case, or a few: RAFTSET_CAMPAIGN=all with pytest's `-k` on the
case ids (e.g. `-k "upgrade and etcd"`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from raftset import contract
from raftset.sidecar.io.etcdclient import EtcdClientError, MemberClient
from tests.harness import campaign, engines, faults, quorum
from tests.harness.campaign import Case, Result
from tests.harness.checker import PREFIX, Ack, ExcusedLoss, Writer, check, lost_writes
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import Operator, kubectl, wait_for
from tests.harness.s3 import fresh_bucket
from tests.harness.toxiproxy import Toxiproxy, peer_listen, pod_peer_proxy_name
from tests.harness.traffic import Traffic, TrafficClient, lincheck, unknown_causes
from tests.harness.view import ClusterView
from tests.harness.waiting import await_for
from tools.devcluster import kubelet, podfaults, procs
from tools.devcluster.podrunner import PodRunner, pod_ip
from tools.devcluster.s3 import S3Server

pytestmark = pytest.mark.e2e

OPERATOR_DEFAULT_KIND = "AdvancedStatefulSet"
ENGINES = {campaign.ETCD: engines.DEFAULT, campaign.XLINE: engines.XLINE}
SIDECAR = {"heartbeatIntervalSeconds": 2, "cleanIntervalSeconds": 2, "cleanGracePeriodSeconds": 120}
# The leader's hash check every 10 s, not 5 min: it runs under every action and fault too, where a
# member it wrongly finds different would be replaced (a new ID: an identity violation).
MAINTENANCE = {"hashCheckIntervalSeconds": 10}
PAUSE_S = 3.0  # past a 500 ms election timeout, and past Xline's default
CUT_S = 5.0  # the follower's elections (pre-vote: refused by the third member, which hears the leader)
SKEW_S = 150  # campaign.CLOCK_SKEWED: past cleanGracePeriodSeconds
SKEWED_FOR_S = 5 * SIDECAR["heartbeatIntervalSeconds"]  # five heartbeats and clean rounds on the skewed clock
VOLUME_MB = 512  # campaign.VOLUME_FULL: every member's volume a tmpfs this size (Xline preallocates 64 MiB WAL segments ahead: 200 filled by itself)
FULL_FOR_S = 20.0  # at most: a full volume is undone as soon as the store exits on it
STEP_S = 240.0
RESULTS = os.environ.get("RAFTSET_CAMPAIGN_RESULTS")

# An upgrade goes one minor at a time, to the default etcd from the minor before it (3.6 -> 3.7).
ETCD_BY_VERSION = sorted(engines.ETCDS, key=lambda e: tuple(map(int, e.version.split("."))))
UPGRADE_FROM = ETCD_BY_VERSION[ETCD_BY_VERSION.index(engines.DEFAULT) - 1]

ALL = campaign.cases()
CASES = ALL if os.environ.get("RAFTSET_CAMPAIGN") == "all" else campaign.short_subset(ALL)


@pytest.fixture
def proxy(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Toxiproxy | None]:
    """A Toxiproxy in front of every member's peer port, for a case whose fault is a partition."""
    if request.node.callspec.params["case"].fault != campaign.CUT_OFF:
        yield None
        return
    with Toxiproxy(tmp_path / "toxiproxy") as toxiproxy:
        yield toxiproxy


@pytest.fixture
def runner(control_plane: Any, namespace: str, tmp_path: Path, proxy: Toxiproxy | None,
           request: pytest.FixtureRequest) -> Iterator[PodRunner]:
    """The e2e tier's runner (tests/e2e/conftest.py), its members behind `proxy` when there is one,
    their sidecars' clocks skewable or their volumes small when the case's fault needs it."""
    fault = request.node.callspec.params["case"].fault
    with PodRunner(control_plane.kubeconfig, tmp_path / "runner", namespace=namespace, faults=tmp_path / "faults",
                   peer_listen=peer_listen(proxy) if proxy is not None else None,
                   skewable_clocks=fault == campaign.CLOCK_SKEWED,
                   volume_mb=VOLUME_MB if fault == campaign.VOLUME_FULL else None) as pods:
        yield pods
    assert not pods.supervisor.procs, "the runner left processes behind"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_an_operator_action_under_a_fault_keeps_every_guarantee(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, proxy: Toxiproxy | None,
        tmp_path: Path, request: pytest.FixtureRequest, case: Case) -> None:
    engine = ENGINES[case.engine]
    engines.ready(engine)
    if case.action == campaign.UPGRADE:
        engines.ready(UPGRADE_FROM)
    # Only a backup needs the S3 server: asked for here, so that no other case starts one.
    s3 = request.getfixturevalue("s3_server") if case.action == campaign.BACKUP_RESTORE else None
    Run(case, engine, control_plane.kubeconfig, namespace, operator, runner, tmp_path, s3, proxy).go()


class Run:
    def __init__(self, case: Case, engine: EngineUnderTest, kubeconfig: str, namespace: str,
                 operator: Operator, runner: PodRunner, tmp_path: Path, s3: S3Server | None,
                 proxy: Toxiproxy | None) -> None:
        self.case, self.engine, self.kubeconfig, self.namespace = case, engine, kubeconfig, namespace
        self.operator, self.runner, self.tmp_path, self.s3, self.proxy = operator, runner, tmp_path, s3, proxy
        self.kv = self.view("kv")
        self.initial = 5 if case.action == campaign.SCALE_IN else 3
        self.final = 5 if case.action == campaign.SCALE_OUT else 3
        self.renewed: set[str] = set()  # pods whose member the action replaces: a new ID
        self.excused: ExcusedLoss | None = None  # set by a quorum loss only
        self.bucket = fresh_bucket(s3) if s3 is not None else ""

    def view(self, name: str) -> ClusterView:
        prefix = self.runner.addresses.prefix(self.namespace, name)
        return ClusterView(self.kubeconfig, self.engine.engine.kind, name, self.namespace, self.case.backend,
                           member_url=lambda o: f"http://{pod_ip(prefix, o)}:2379")

    def spec(self) -> dict[str, Any]:
        """The cluster's spec: the engine's options, and what the action needs."""
        spec: dict[str, Any] = {"storage": {"size": "1Gi"}, "sidecar": SIDECAR, "maintenance": MAINTENANCE,
                                "version": UPGRADE_FROM.version if self.case.action == campaign.UPGRADE
                                else self.engine.version}
        if self.case.engine == campaign.ETCD:
            spec["options"] = dict(self.engine.options)
        if self.case.action == campaign.QUORUM_LOSS:  # the campaign asks, once it has read the survivor
            spec["recovery"] = {"quorumLoss": "Manual"}
        if self.case.action == campaign.BACKUP_RESTORE:
            spec["backup"] = {"s3": self.s3_spec()}
        return spec

    def s3_spec(self) -> dict[str, Any]:
        assert self.s3 is not None
        return {"endpoint": self.s3.endpoint, "bucket": self.bucket, "prefix": "campaign",
                "credentialsSecret": "s3-credentials"}

    def go(self) -> None:
        kv = self.kv
        if self.s3 is not None:
            kubectl(self.kubeconfig, "create", "secret", "generic", "s3-credentials", "-n", self.namespace,
                    f"--from-literal={contract.ACCESS_KEY_FILE}={self.s3.access_key}",
                    f"--from-literal={contract.SECRET_KEY_FILE}={self.s3.secret_key}")
        kv.create(self.initial, workloadKind=self.case.backend, **self.spec())
        kv.wait_healthy(*range(self.initial))
        before = self.ids(range(self.initial))
        endpoints = [kv.url(o) for o in range(max(self.initial, self.final))]
        traffic = Traffic(endpoints, watchers=2, timeout=1.0)
        writer = Writer(endpoints[:self.initial], timeout=1.0, deadline=10.0, lifetime=1200.0)
        traffic.start()
        writer.start()
        try:
            assert traffic.started_clients.wait(30), traffic.errors[-3:]
            wait_for(lambda: writer.ok > 20, 60, "the writer running")
            self.act_with_fault()
            written = writer.ok
            wait_for(lambda: writer.ok > written + 20, 60, "writes acknowledged after the action")
        finally:
            traffic.stop(timeout=60)
            writer.stop()
            if not self.operator.alive():
                self.operator.start()  # the module's other cases share it
        self.verdict(before, traffic, writer)

    # ---- the action, with the fault in its middle

    def act_with_fault(self) -> None:
        action, kv = self.case.action, self.kv
        if action in (campaign.SCALE_IN, campaign.SCALE_OUT):
            kv.scale(self.final)
            wait_for(lambda: kv.workload()["spec"]["replicas"] != self.initial, STEP_S, "the first scaling step")
            if action == campaign.SCALE_OUT:  # in the middle: the first new member's store started, joining
                first = contract.pod_name(kv.name, self.initial)
                wait_for(lambda: self.alive(first, "store"), STEP_S, f"{first}'s store started")
            self.fault()
            wait_for(lambda: len(kv.pods()) == self.final, STEP_S, f"{self.final} pods")
        elif action == campaign.ROLL:
            self.roll({"sidecar": {**SIDECAR, "heartbeatIntervalSeconds": 3}})
        elif action == campaign.UPGRADE:  # the operator rolls the members, the leader last
            self.roll({"version": self.engine.version})
            wait_for(lambda: kv.status().get("version") == self.engine.version, STEP_S,
                     f"status.version {self.engine.version}")
            wait_for(lambda: self.versions() == {self.engine.version}, STEP_S,
                     f"every member serving on {self.engine.version}")
        elif action in campaign.REPLACES:
            leader = self.leader()
            victim = leader if action == campaign.REPLACE_LEADER else next(o for o in range(3) if o != leader)
            replaced = contract.pod_name(kv.name, victim)
            self.renewed = {replaced}
            old = self.ids(range(3))[replaced]
            kubectl(self.kubeconfig, "annotate", "pod", "-n", kv.namespace, replaced,
                    f"{contract.ANNOTATION_REPLACE}=true")
            wait_for(lambda: kv.status().get("replacements"), STEP_S, "the replacement begun")
            self.fault(avoid=victim)
            def done() -> bool:
                voters = {m.name: m.id for m in kv.members(*self.serving()) if m.started and not m.is_learner}
                return not kv.status().get("replacements") and voters.get(replaced) not in (None, old) \
                    and len(voters) == 3
            wait_for(done, STEP_S, f"{replaced} replaced by a new voting member")
        elif action == campaign.QUORUM_LOSS:
            self.lose_quorum_and_recover()
        elif action == campaign.BACKUP_RESTORE:  # the restore comes after the traffic: see restore_problems
            self.back_up()
        elif action == campaign.LIGHTS_OUT:
            for proc in self.cluster_procs(""):
                self.runner.supervisor.kill(proc)
            self.fault()
        else:
            raise AssertionError(f"{action}: not driven by this test")
        kv.wait_healthy(*self.serving())

    def roll(self, change: dict[str, Any]) -> None:
        """A spec change that re-creates every pod; the fault once the first one is re-created."""
        kv = self.kv
        created = {p.metadata.name: p.metadata.creation_timestamp for p in kv.pod_objects()}
        kubectl(self.kubeconfig, "patch", f"{kv.plural}/{kv.name}", "-n", kv.namespace, "--type=merge",
                "-p", json.dumps({"spec": change}))
        def renewed() -> int:
            return sum(p.metadata.creation_timestamp > created.get(p.metadata.name, p.metadata.creation_timestamp)
                       for p in kv.pod_objects())
        wait_for(lambda: renewed() >= 1, STEP_S, "the roll's first pod re-created")
        self.fault()
        wait_for(lambda: renewed() == 3 and len(kv.pods()) == 3, STEP_S, "every pod re-created")

    def versions(self) -> set[str | None]:
        """The version each member reports in Status (None: no answer)."""
        async def ask() -> set[str | None]:
            found: set[str | None] = set()
            for ordinal in self.serving():
                try:
                    async with MemberClient(self.kv.url(ordinal), timeout=3) as c:
                        found.add((await c.status()).version)
                except EtcdClientError:
                    found.add(None)
            return found
        return asyncio.run(ask())

    def lose_quorum_and_recover(self) -> None:
        """kv-1 and kv-2 lost with their volumes; once the operator reports QuorumLost, the survivor's
        revision is read (it can commit nothing more), the recovery asked for, and the fault injected
        while it runs: on the survivor, the only member left."""
        kv = self.kv
        quorum.lose_majority(kv, self.runner)
        self.renewed = kv.pod_names(1, 2)
        wait_for(lambda: [m for r, m in kv.events() if r == "QuorumLost"], 120, "the QuorumLost Event")
        wait_for(lambda: kv.condition("QuorumLost").get("reason") == "QuorumLost", 60, "the QuorumLost condition")
        self.excused = ExcusedLoss(asyncio.run(survivor_revision(kv.url(0))), frozenset({kv.url(1), kv.url(2)}))
        print(f"{self.case.id}: {self.excused}")
        kubectl(self.kubeconfig, "annotate", f"{kv.plural}/{kv.name}", "-n", kv.namespace,
                f"{contract.ANNOTATION_RECOVER_QUORUM}=auto")
        wait_for(lambda: kv.condition("QuorumLost").get("reason") in ("Recovering", "Rejoining", "Recovered"), 120,
                 "the recovery started")
        self.fault(target=0)
        wait_for(lambda: kv.condition("QuorumLost").get("reason") == "Recovered", 2 * STEP_S,
                 "every member votes again")

    def back_up(self) -> None:
        """backup-now; the fault once the operator has taken the request; a failed backup is asked for
        again, as a person would (printed: a finding to look at)."""
        kv = self.kv
        def annotations() -> dict[str, str]:
            return kv.obj()["metadata"].get("annotations") or {}
        def ask() -> None:
            kubectl(self.kubeconfig, "annotate", f"{kv.plural}/{kv.name}", "-n", kv.namespace, "--overwrite",
                    f"{contract.ANNOTATION_BACKUP_NOW}=true")
            wait_for(lambda: contract.ANNOTATION_BACKUP_NOW not in annotations(), 60, "the backup request taken")
        ask()
        self.fault()
        def outcome() -> tuple[str, dict[str, Any]] | None:
            backup = kv.status().get("backup") or {}
            if backup.get("lastSuccess"):
                return "success", backup["lastSuccess"]
            return ("failure", backup["lastFailure"]) if backup.get("lastFailure") else None
        kind, said = wait_for(outcome, STEP_S, "the backup's outcome")
        if kind == "failure":
            print(f"{self.case.id}: the backup failed ({said}); asked again")
            ask()
            wait_for(lambda: (kv.status().get("backup") or {}).get("lastSuccess"), STEP_S, "a backup")

    def fault(self, avoid: int | None = None, target: int | None = None) -> None:
        fault = self.case.fault
        if fault == campaign.NO_FAULT:
            return
        if fault == campaign.OPERATOR_KILLED:
            with faults.operator_killed(self.operator):
                pass
            return
        if target is None and fault in (campaign.LEADER_KILLED, campaign.LEADER_PAUSED, campaign.SIDECAR_KILLED,
                                        campaign.CLOCK_SKEWED):
            target = self.leader()
        elif target is None:
            leader = self.leader()
            target = next(o for o in sorted(self.serving(), reverse=True) if o not in (leader, avoid)
                          and self.alive(contract.pod_name(self.kv.name, o), "store"))  # a joining pod may have none yet
        pod = contract.pod_name(self.kv.name, target)
        print(f"{self.case.id}: {fault} on {pod}, members serving {self.serving()}")
        if fault in (campaign.LEADER_KILLED, campaign.FOLLOWER_KILLED):
            self.runner.supervisor.kill(self.running(pod, "store"))
        elif fault == campaign.SIDECAR_KILLED:
            if self.case.action in (campaign.LIGHTS_OUT, campaign.QUORUM_LOSS):  # its pod may be restarting
                wait_for(lambda: self.alive(pod, "sidecar"), STEP_S, f"{pod}'s sidecar restarted")
            self.runner.supervisor.kill(self.running(pod, "sidecar"))
        elif fault in (campaign.LEADER_PAUSED, campaign.FOLLOWER_PAUSED):
            with paused(self.running(pod, "store")):
                time.sleep(PAUSE_S)
        elif fault == campaign.LEASES_REFUSED:
            with quorum.lease_writes_refused(self.kv.api, self.kv.namespace, [pod]):
                time.sleep(3 * SIDECAR["heartbeatIntervalSeconds"])
        elif fault == campaign.CUT_OFF:
            assert self.proxy is not None
            leader = self.leader()
            assert leader != target, f"{pod} became the leader before its cut"
            prefix = self.runner.addresses.prefix(self.namespace, self.kv.name)
            with faults.links_cut(self.proxy, [pod_peer_proxy_name(pod_ip(prefix, o)) for o in (target, leader)]):
                began = time.monotonic()
                # Seen, not assumed: a linearizable read on the cut member needs the leader's read index.
                wait_for(lambda: not asyncio.run(answers_linearizably(self.kv.url(target))), CUT_S,
                         f"{pod}'s linearizable reads refused while it is cut off")
                time.sleep(max(0.0, CUT_S - (time.monotonic() - began)))
        elif fault == campaign.CLOCK_SKEWED:
            self.clock_skewed(pod, target)
        elif fault == campaign.VOLUME_FULL:
            self.volume_full(pod)
        else:
            raise AssertionError(f"{fault}: no injection")

    def clock_skewed(self, pod: str, ordinal: int) -> None:
        """The sidecar's wall clock SKEW_S ahead, seen in its heartbeat, for SKEWED_FOR_S; then true again."""
        offset = self.runner.clock_offset(self.kv.namespace, pod)
        podfaults.skew(offset, SKEW_S)
        try:
            wait_for(lambda: self.heartbeat_ahead(ordinal) > SKEW_S / 2, 30,
                     f"{pod}'s heartbeat stamped by its skewed clock")
            time.sleep(SKEWED_FOR_S)
        finally:
            podfaults.skew(offset, 0)

    def heartbeat_ahead(self, ordinal: int) -> float:
        """How far ahead of this clock the sidecar stamps its heartbeat (-inf: no answer)."""
        prefix = self.runner.addresses.prefix(self.namespace, self.kv.name)
        try:
            status, body = kubelet.http_get(f"http://{pod_ip(prefix, ordinal)}:{contract.SIDECAR_PORT}/heartbeat", 2)
        except OSError:
            return float("-inf")
        if status != 200:
            return float("-inf")
        return podfaults.stamped_ahead(json.loads(body))

    def volume_full(self, pod: str) -> None:
        """A ballast takes every free byte of the member's volume until its store exits on it (etcd:
        at its next bbolt growth) or FULL_FOR_S pass; then the ballast goes and kubelet (the pod
        runner) starts the store again if it exited."""
        store = self.running(pod, "store")
        ballast = podfaults.fill(self.runner.volumes[f"{self.kv.namespace}/{pod}"])
        try:
            until = time.monotonic() + FULL_FOR_S
            while store.alive() and time.monotonic() < until:
                time.sleep(0.2)
            print(f"{self.case.id}: {pod}'s store {'still runs' if store.alive() else 'exited'} on its full volume")
        finally:
            ballast.unlink()

    # ---- the members and their processes

    def serving(self) -> list[int]:
        return sorted(int(p.rsplit("-", 1)[1]) for p in self.kv.pods())

    def leader(self) -> int:
        found = wait_for(lambda: (leader := self.kv.leader(*self.serving())) is not None and (leader,), STEP_S,
                         "a leader")  # a tuple: ordinal 0 is a leader too
        return found[0]

    def ids(self, ordinals: Any) -> dict[str, int]:
        return {m.name: m.id for m in self.kv.members(*ordinals)}

    def cluster_procs(self, container: str) -> list[procs.Proc]:
        return [p for p in list(self.runner.supervisor.procs)
                if f".{self.kv.name}-" in p.name and p.name.endswith(container) and p.alive()]

    def alive(self, pod: str, container: str) -> bool:
        return any(p.name.startswith(f"{self.kv.namespace}.{pod}.") for p in self.cluster_procs(container))

    def running(self, pod: str, container: str) -> procs.Proc:
        found = [p for p in self.cluster_procs(container) if p.name.startswith(f"{self.kv.namespace}.{pod}.")]
        assert len(found) == 1, f"{pod}: {len(found)} {container} processes running"
        return found[0]

    # ---- the verdict

    def verdict(self, before: dict[str, int], traffic: Traffic, writer: Writer) -> None:
        # Only a quorum loss excuses anything: the writes its lost members alone acknowledged.
        ops = traffic.history if self.excused is None else self.excused.history(traffic.history)
        excused = {} if self.excused is None else self.excused.acks(writer.acked)
        checked = traffic.settled(ops)  # without the writes a watcher proves never took effect
        verdict = lincheck(checked, self.tmp_path / f"{self.case.id}.html")
        watch = traffic.watch_problems(ops)
        identity = identity_problems(self.case.action, before, self.ids(self.serving()), self.renewed)
        kept = {k: a for k, a in writer.acked.items() if k not in excused}
        lost = acknowledged_lost([self.kv.url(o) for o in self.serving()], kept, identity)
        gone = asyncio.run(excused_gone([self.kv.url(o) for o in self.serving()], excused))
        restore = self.restore_problems(before, traffic, writer.acked) if self.case.action == campaign.BACKUP_RESTORE \
            else []
        result = Result(self.case, len(ops), int(not verdict.linearizable) + len(watch) + len(identity) + len(restore),
                        lost + gone, campaign.longest_unavailability((op.call, op.returned) for op in ops))
        print(f"{self.case.id}: {result}; {verdict.summary}; {len(ops) - len(checked)} writes of unknown outcome "
              f"settled as not done by the watch; unknown outcomes by cause {unknown_causes(ops)}; "
              f"writer {writer.ok} ok, {writer.failed} failed; "
              f"{len(watch)} watch problems, first {watch[:3]}, watches ended by {traffic.watch_errors}; identity and agreement problems {identity}; "
              f"excused by the quorum loss: {len(excused)} acknowledged writes, {gone} of them gone; "
              f"restore problems {restore}")
        if RESULTS:
            campaign.save(result, Path(RESULTS))
        assert verdict.linearizable, verdict.summary
        assert watch == [], watch[:5]
        assert identity == [], identity
        assert restore == [], restore
        assert lost == 0, f"{lost} acknowledged writes lost (none excused)"

    def restore_problems(self, before: dict[str, int], traffic: Traffic, acked: dict[str, Ack]) -> list[str]:
        """A new cluster from the backup (`fromBackup: latest`) must hold every write acknowledged at or
        below the backup's revision (the acknowledged-write checker on it, HashKV included), and its
        traffic keys exactly as the source held them at one revision from the backup's on (the
        snapshot may hold later writes, never a mix); its members are new ones."""
        success = self.kv.status()["backup"]["lastSuccess"]
        revision = int(success["revision"])
        restored = self.view("kv2")
        restored.create(3, workloadKind=self.case.backend, **{
            **{k: v for k, v in self.spec().items() if k != "backup"},
            "bootstrap": {"fromBackup": {"backup": "latest", "cluster": self.kv.name, "s3": self.s3_spec()}}})
        restored.wait_healthy(0, 1, 2)
        problems: list[str] = []
        in_backup = {k: a for k, a in acked.items() if a.revision <= revision}
        if acknowledged_lost([restored.url(o) for o in range(3)], in_backup, problems):
            problems.append(f"of {len(in_backup)} writes acknowledged at or below revision {revision}, some lost")
        held_at = asyncio.run(matching_revision(self.kv.url(0), restored.url(0), traffic.prefix, revision))
        if held_at is None:
            problems.append(f"the restored {traffic.prefix} keys match no revision of the source from {revision} on")
        reused = {n: i for n, i in self.ids_of(restored).items() if i in before.values()}
        if reused:
            problems.append(f"restored members with the source's IDs: {reused}")
        print(f"{self.case.id}: backup {success['key']} at revision {revision}: {len(in_backup)} acknowledged writes "
              f"in it; the restored traffic keys are the source's at revision {held_at}")
        return problems

    def ids_of(self, view: ClusterView) -> dict[str, int]:
        return {m.name: m.id for m in view.members(0, 1, 2)}


def acknowledged_lost(urls: list[str], acked: dict[str, Ack], problems: list[str]) -> int:
    """The acknowledged-write checker: the number of writes lost; members that disagree go to `problems`."""
    try:
        asyncio.run(check(urls, acked))
    except AssertionError as exc:
        found = re.search(r"(\d+) of \d+ acknowledged writes lost", str(exc))
        if found is None:  # the members disagree: not a lost write, still a violation
            problems.append(str(exc))
        return int(found.group(1)) if found else 0
    return 0


async def excused_gone(urls: list[str], excused: dict[str, Ack]) -> int:
    """How many of the excused writes the recovered cluster really lost (counted, not a violation)."""
    if not excused:
        return 0
    async def read() -> dict[str, tuple[str, int]]:
        async with TrafficClient(urls[0], timeout=5) as c:
            return (await c.prefix_at(PREFIX))[1]
    return len(lost_writes(excused, await await_for(read, 60, "the writer's keys")))


async def answers_linearizably(url: str) -> bool:
    try:
        async with MemberClient(url, timeout=1.0) as c:
            await c.get(PREFIX)
    except EtcdClientError:
        return False
    return True


async def survivor_revision(url: str) -> int:
    """The revision the survivor holds once it has applied all it committed: without quorum it can
    commit nothing more (tests/harness/quorum.frozen_revision, on a member of the whole stack)."""
    async def settled() -> int | None:
        async with MemberClient(url, timeout=3) as c:
            status = await c.status()
            if status.raft_applied_index < status.raft_index:
                return None
            revision, _ = await c.get_prefix(PREFIX, serializable=True)
            return revision
    return await await_for(settled, 60, f"{url} applied what it committed")


async def matching_revision(source: str, restored: str, prefix: str, since: int) -> int | None:
    """The first revision from `since` at which the source held exactly what the restored cluster holds
    under `prefix` (None: none up to the restored cluster's own revision, or the source's now)."""
    async with TrafficClient(restored, timeout=10) as r, TrafficClient(source, timeout=10) as s:
        restored_at, held = await r.prefix_at(prefix)
        now, _ = await s.prefix_at(prefix)
        for revision in range(since, min(now, restored_at) + 1):
            if (await s.prefix_at(prefix, revision))[1] == held:
                return revision
    return None


def identity_problems(action: str, before: dict[str, int], after: dict[str, int], renewed: set[str]) -> list[str]:
    """Member IDs kept by every member that stays, new for a replaced or added one."""
    problems = []
    for name, member in after.items():
        if name in renewed or name not in before:
            if member in before.values():
                problems.append(f"{name}: kept an ID it should not ({member:x})")
        elif member != before[name]:
            problems.append(f"{name}: ID {before[name]:x} became {member:x}")
    if action == campaign.SCALE_OUT and len(after) != 5:
        problems.append(f"{len(after)} members after a scale-out to 5")
    if action != campaign.SCALE_OUT and len(after) != 3:
        problems.append(f"{len(after)} members, not 3")
    return problems


@contextmanager
def paused(proc: procs.Proc) -> Iterator[None]:
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(proc.pid, signal.SIGCONT)

