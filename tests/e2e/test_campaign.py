"""The robustness campaign (issue 27, item 4): an operator action, a fault injected in its middle,
on the real control plane with real members, under recorded client traffic. Every run ends with
the linearizability verdict (lincheck), the watch checks, the acknowledged-write checker and the
identity checks. The cases are tests/harness/campaign.py's table: `make test` runs its seeded
short subset, `make robustness` (RAFTSET_CAMPAIGN=all) every driven case, saving each result for
docs/robustness.md's table.
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
from tests.harness import campaign, engines, faults, quorum
from tests.harness.campaign import Case, Result
from tests.harness.checker import Writer, check
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import Operator, kubectl, wait_for
from tests.harness.traffic import Traffic, lincheck
from tests.harness.view import ClusterView
from tools.devcluster import procs
from tools.devcluster.podrunner import PodRunner, pod_ip

pytestmark = pytest.mark.e2e

OPERATOR_DEFAULT_KIND = "AdvancedStatefulSet"
ENGINES = {campaign.ETCD: engines.DEFAULT, campaign.XLINE: engines.XLINE}
SIDECAR = {"heartbeatIntervalSeconds": 2, "cleanIntervalSeconds": 2, "cleanGracePeriodSeconds": 120}
PAUSE_S = 3.0  # past a 500 ms election timeout, and past Xline's default
STEP_S = 240.0
RESULTS = os.environ.get("RAFTSET_CAMPAIGN_RESULTS")

ALL = campaign.cases()
CASES = campaign.driven(ALL) if os.environ.get("RAFTSET_CAMPAIGN") == "all" else campaign.short_subset(ALL)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_an_operator_action_under_a_fault_keeps_every_guarantee(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, tmp_path: Path,
        case: Case) -> None:
    engine = ENGINES[case.engine]
    engines.ready(engine)
    kv = ClusterView(control_plane.kubeconfig, engine.engine.kind, "kv", namespace, case.backend,
                     member_url=lambda o: f"http://{pod_ip(runner.addresses.prefix(namespace, 'kv'), o)}:2379")
    Run(case, engine, kv, control_plane.kubeconfig, operator, runner, tmp_path).go()


class Run:
    def __init__(self, case: Case, engine: EngineUnderTest, kv: ClusterView, kubeconfig: str,
                 operator: Operator, runner: PodRunner, tmp_path: Path) -> None:
        self.case, self.engine, self.kv, self.kubeconfig = case, engine, kv, kubeconfig
        self.operator, self.runner, self.tmp_path = operator, runner, tmp_path
        self.initial = 5 if case.action == campaign.SCALE_IN else 3
        self.final = 5 if case.action == campaign.SCALE_OUT else 3
        self.replaced: str | None = None

    def go(self) -> None:
        kv = self.kv
        options = {"options": dict(self.engine.options)} if self.case.engine == campaign.ETCD else {}
        kv.create(self.initial, workloadKind=self.case.backend, version=self.engine.version,
                  storage={"size": "1Gi"}, sidecar=SIDECAR, **options)
        kv.wait_healthy(*range(self.initial))
        before = self.ids(range(self.initial))
        endpoints = [kv.url(o) for o in range(max(self.initial, self.final))]
        traffic = Traffic(endpoints, watchers=2, timeout=1.0)
        writer = Writer(endpoints[:self.initial], timeout=1.0, deadline=10.0)
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
            created = {p.metadata.name: p.metadata.creation_timestamp for p in kv.pod_objects()}
            kubectl(self.kubeconfig, "patch", f"{kv.plural}/{kv.name}", "-n", kv.namespace, "--type=merge",
                    "-p", json.dumps({"spec": {"sidecar": {**SIDECAR, "heartbeatIntervalSeconds": 3}}}))
            def renewed() -> int:
                return sum(p.metadata.creation_timestamp > created.get(p.metadata.name, p.metadata.creation_timestamp)
                           for p in kv.pod_objects())
            wait_for(lambda: renewed() >= 1, STEP_S, "the roll's first pod re-created")
            self.fault()
            wait_for(lambda: renewed() == 3 and len(kv.pods()) == 3, STEP_S, "every pod re-created")
        elif action in campaign.REPLACES:
            leader = self.leader()
            victim = leader if action == campaign.REPLACE_LEADER else next(o for o in range(3) if o != leader)
            self.replaced = contract.pod_name(kv.name, victim)
            old = self.ids(range(3))[self.replaced]
            kubectl(self.kubeconfig, "annotate", "pod", "-n", kv.namespace, self.replaced,
                    f"{contract.ANNOTATION_REPLACE}=true")
            wait_for(lambda: kv.status().get("replacements"), STEP_S, "the replacement begun")
            self.fault(avoid=victim)
            def replaced() -> bool:
                voters = {m.name: m.id for m in kv.members(*self.serving()) if m.started and not m.is_learner}
                return not kv.status().get("replacements") and voters.get(self.replaced) not in (None, old) \
                    and len(voters) == 3
            wait_for(replaced, STEP_S, f"{self.replaced} replaced by a new voting member")
        elif action == campaign.LIGHTS_OUT:
            for proc in self.cluster_procs(""):
                self.runner.supervisor.kill(proc)
            self.fault()
        else:
            raise AssertionError(f"{action}: not driven by this test (campaign.DRIVEN)")
        kv.wait_healthy(*self.serving())

    def fault(self, avoid: int | None = None) -> None:
        fault = self.case.fault
        if fault == campaign.NO_FAULT:
            return
        if fault == campaign.OPERATOR_KILLED:
            with faults.operator_killed(self.operator):
                pass
            return
        if fault in (campaign.LEADER_KILLED, campaign.LEADER_PAUSED, campaign.SIDECAR_KILLED):
            target = self.leader()
        else:
            leader = self.leader()
            target = next(o for o in sorted(self.serving(), reverse=True) if o not in (leader, avoid)
                          and self.alive(contract.pod_name(self.kv.name, o), "store"))  # a joining pod may have none yet
        pod = contract.pod_name(self.kv.name, target)
        print(f"{self.case.id}: {fault} on {pod}, members serving {self.serving()}")
        if fault in (campaign.LEADER_KILLED, campaign.FOLLOWER_KILLED):
            self.runner.supervisor.kill(self.running(pod, "store"))
        elif fault == campaign.SIDECAR_KILLED:
            if self.case.action == campaign.LIGHTS_OUT:  # its sidecar killed again while the members restart
                wait_for(lambda: self.alive(pod, "sidecar"), STEP_S, f"{pod}'s sidecar restarted")
            self.runner.supervisor.kill(self.running(pod, "sidecar"))
        elif fault in (campaign.LEADER_PAUSED, campaign.FOLLOWER_PAUSED):
            with paused(self.running(pod, "store")):
                time.sleep(PAUSE_S)
        elif fault == campaign.LEASES_REFUSED:
            with quorum.lease_writes_refused(self.kv.api, self.kv.namespace, [pod]):
                time.sleep(3 * SIDECAR["heartbeatIntervalSeconds"])
        else:
            raise AssertionError(f"{fault}: no injection")

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
        ops = traffic.history
        verdict = lincheck(ops, self.tmp_path / f"{self.case.id}.html")
        watch = traffic.watch_problems()
        identity = identity_problems(self.case.action, before, self.ids(self.serving()), self.replaced)
        lost = 0
        try:
            asyncio.run(check([self.kv.url(o) for o in self.serving()], writer.acked))
        except AssertionError as exc:
            found = re.search(r"(\d+) of \d+ acknowledged writes lost", str(exc))
            if found is None:  # the members disagree: not a lost write, still a violation
                identity.append(str(exc))
            lost = int(found.group(1)) if found else 0
        result = Result(self.case, len(ops), int(not verdict.linearizable) + len(watch) + len(identity), lost,
                        campaign.longest_unavailability((op.call, op.returned) for op in ops))
        print(f"{self.case.id}: {result}; {verdict.summary}; writer {writer.ok} ok, {writer.failed} failed; "
              f"{len(watch)} watch problems, first {watch[:3]}; identity and agreement problems {identity}")
        if RESULTS:
            campaign.save(result, Path(RESULTS))
        assert verdict.linearizable, verdict.summary
        assert watch == [], watch[:5]
        assert identity == [], identity
        assert lost == 0, f"{lost} acknowledged writes lost"


def identity_problems(action: str, before: dict[str, int], after: dict[str, int], replaced: str | None) -> list[str]:
    """Member IDs kept by every member that stays, new for a replaced or added one."""
    problems = []
    for name, member in after.items():
        if name == replaced or name not in before:
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

