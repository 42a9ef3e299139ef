"""Issue 12: a quorum-loss recovery survives the operator SIGKILLed midway.

The operator keeps nothing in memory, so a new process must resume the recovery from what the
API records (the recovery record on the workload, the request annotation, the status) and
finish it: the same recovery (same id, same survivor), no second one, no refused request of
its own, each Event once, every acknowledged write kept.

Real parts throughout: kube-apiserver, controller-manager, kwok, the operator as a process,
the sidecars and etcd members run by the pod runner, and a real Toxiproxy between the first
operator and the apiserver. That proxy makes the first kill point deterministic: with 2 s on
the apiserver's answers to the operator, the operator learns that its record was written 2 s
after the apiserver stored it, while the test (on a direct link) sees it at once and SIGKILLs
the operator in between, before it posted the start Event, removed the request or restarted a
pod (each of which it sends only once that answer is in). Its requests go through undelayed: a
delay there would not widen that window, only slow every reconcile before it. The second kill
point is while the other members rejoin.

Both kill points run under both policies (the annotation under Manual, the grace period under
Automatic) and on both backends: four cases that cover every pair of kill point, policy and
backend, rather than all eight.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from raftset import contract
from raftset.quorum_loss import parse_record
from tests.e2e.test_fullstack import FAST, stack
from tests.harness.background import Background
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import Operator, install_crds, kubectl, wait_for
from tests.harness.quorum import lose_majority, recovered, survivor_kept, survivor_writing
from tests.harness.toxiproxy import Toxiproxy
from tests.harness.view import ClusterView
from tools.devcluster.net import free_port
from tools.devcluster.podrunner import PodRunner

pytestmark = pytest.mark.e2e

API_DELAY_MS = 2000  # on the apiserver's answers to the first operator: the kill lands well inside it
GRACE_SECONDS = 10  # spec.recovery.quorumLossGracePeriodSeconds under Automatic: time to slow the link first
# (kill point, spec.recovery.quorumLoss, workload kind): every pair of values appears once.
CASES = [("record-written", "Manual", "StatefulSet"), ("rejoining", "Manual", "AdvancedStatefulSet"),
         ("record-written", "Automatic", "AdvancedStatefulSet"), ("rejoining", "Automatic", "StatefulSet")]


def proxied_kubeconfig(kubeconfig: str, server: str, path: Path) -> str:
    """The admin kubeconfig with its server replaced by the proxy in front of the apiserver
    (the serving certificate names the plane's IP, whatever the port)."""
    doc = yaml.safe_load(Path(kubeconfig).read_text())
    for entry in doc["clusters"]:
        entry["cluster"]["server"] = server
    path.write_text(yaml.safe_dump(doc))
    return str(path)


class Watch(Background):
    """Polls the API on a direct link: every recovery id recorded on the workload, every
    QuorumLost reason in the status, in the order seen."""

    def __init__(self, kv: ClusterView) -> None:
        self.kv = kv
        self.ids: list[str] = []
        self.reasons: list[str] = []
        super().__init__()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                workload = self.kv.workload()
                record = parse_record((workload["metadata"].get("annotations") or {})
                                      .get(contract.ANNOTATION_QUORUM_RECOVERY))
                reason = self.kv.condition("QuorumLost").get("reason")
            except Exception:  # noqa: BLE001 - an API hiccup: the next poll sees it
                continue
            if record is not None and (not self.ids or self.ids[-1] != record.id):
                self.ids.append(record.id)
            if reason and (not self.reasons or self.reasons[-1] != reason):
                self.reasons.append(reason)


def narration(kv: ClusterView) -> list[tuple[str, str, str]]:
    """The cluster's Events in the order they were first posted: (time, reason, message)."""
    found = kv.core.list_namespaced_event(
        kv.namespace, field_selector=f"involvedObject.name={kv.name},involvedObject.kind={kv.kind}").items
    rows = [(str(e.first_timestamp or e.event_time or ""), e.reason, e.message) for e in found]
    return sorted(rows, key=lambda row: row[0])


@pytest.fixture
def operators(control_plane: Any) -> Iterator[list[Operator]]:
    """The operator processes a test starts (none is running at first), stopped at the end."""
    install_crds(control_plane.kubeconfig)
    started: list[Operator] = []
    yield started
    for op in started:
        op.stop()


@pytest.mark.parametrize(("kill_at", "policy", "backend"), CASES)
def test_the_operator_killed_mid_recovery_resumes_it_from_the_api(
        control_plane: Any, operators: list[Operator], namespace: str, runner: PodRunner, tmp_path: Path,
        kill_at: str, policy: str, backend: str, etcd: EngineUnderTest) -> None:
    kubeconfig = control_plane.kubeconfig
    toxiproxy = Toxiproxy(tmp_path / "toxiproxy", host=control_plane.host)
    try:
        upstream = control_plane.url.removeprefix("https://")
        listen = f"{control_plane.host}:{free_port(control_plane.host)}"
        toxiproxy.proxy("apiserver", listen, upstream)
        first = Operator(proxied_kubeconfig(kubeconfig, f"https://{listen}", tmp_path / "proxied.kubeconfig"),
                         tmp_path / "operator-1.log")
        operators.append(first)
        first.start()
        _run(kubeconfig, namespace, runner, toxiproxy, operators, tmp_path, kill_at, policy, backend, etcd)
    finally:
        toxiproxy.close()


def _run(kubeconfig: str, namespace: str, runner: PodRunner, toxiproxy: Toxiproxy, operators: list[Operator],
         tmp_path: Path, kill_at: str, policy: str, backend: str, etcd: EngineUnderTest) -> None:
    kv = stack(kubeconfig, namespace, "kv", runner)
    survivor_id, writer = survivor_writing(
        kv, backend, etcd.version, {"quorumLoss": policy, "quorumLossGracePeriodSeconds": GRACE_SECONDS}, **FAST)
    try:
        with Watch(kv) as watch:
            lost_at = time.monotonic()
            lose_majority(kv, runner)
            wait_for(lambda: [m for r, m in kv.events() if r == "QuorumLost"], 90, "the QuorumLost Event")
            reported = time.monotonic() - lost_at
            acked_at_loss = writer.ok

            if kill_at == "record-written":
                toxiproxy.latency("apiserver", API_DELAY_MS, streams=("downstream",))
            if policy == "Manual":  # under Automatic the grace period, running since the loss, asks
                kubectl(kubeconfig, "annotate", f"etcdclusters/{kv.name}", "-n", namespace,
                        f"{contract.ANNOTATION_RECOVER_QUORUM}=auto")
            requested_at = time.monotonic()
            if kill_at == "record-written":
                # Under Automatic the operator's own timer must find the grace over, each of its
                # reconciles slowed by the delay: minutes, not the seconds an annotation takes.
                wait_for(lambda: watch.ids, 240, "the recovery record on the workload", interval=0.02)
            else:
                wait_for(lambda: "Rejoining" in watch.reasons, 180, "the survivor leading alone (Rejoining)")
            recorded_at = time.monotonic()
            operators[0].kill()
            killed = dict(ids=list(watch.ids), reasons=list(watch.reasons),
                          started_events=sum(r == "QuorumRecoveryStarted" for r, _ in kv.events()),
                          request=kv.obj()["metadata"].get("annotations", {}).get(
                              contract.ANNOTATION_RECOVER_QUORUM),
                          record=contract.ANNOTATION_QUORUM_RECOVERY in kv.workload()["metadata"]["annotations"])
            print(f"operator SIGKILLed at {kill_at}: {killed}")
            assert killed["record"], "killed while the recovery runs"
            if kill_at == "record-written":
                # The window the proxy holds open: nothing after the record was done.
                assert killed["started_events"] == 0, killed
                assert killed["request"] == ("auto" if policy == "Manual" else None), killed
            second = Operator(kubeconfig, tmp_path / "operator-2.log")
            operators.append(second)
            second.start()
            restarted_at = time.monotonic()

            writable, full = recovered(kv, writer, acked_at_loss, lost_at)
    finally:
        writer.stop()

    assert len(watch.ids) == 1, f"one recovery, never a second: {watch.ids}"
    record_id = watch.ids[0]
    events = narration(kv)
    reasons = Counter(r for _, r, _ in events)
    messages = [m for _, r, m in events if r == "QuorumRecoveryStarted"]
    print("events:\n" + "\n".join(f"  {t} {r}: {m}" for t, r, m in events))
    print(f"QuorumLost reasons seen: {watch.reasons}")
    assert reasons["QuorumRecoveryStarted"] == 1 and record_id in messages[0] and "kv-0" in messages[0], messages
    assert f"({'auto' if policy == 'Manual' else 'Automatic'})" in messages[0], messages
    assert reasons["QuorumRecovered"] == 1 and reasons["QuorumRestored"] == 1, reasons
    assert reasons["RecoveryRefused"] == 0 and reasons["NoSurvivor"] == 0, reasons
    assert contract.ANNOTATION_RECOVER_QUORUM not in (kv.obj()["metadata"].get("annotations") or {})
    assert contract.ANNOTATION_QUORUM_RECOVERY not in (kv.workload()["metadata"].get("annotations") or {})
    verdict = survivor_kept(kv, writer, survivor_id)
    print(f"RTO, quorum loss ({policy}, {backend}) with the operator SIGKILLed at {kill_at} and restarted: loss -> QuorumLost reported "
          f"{reported:.1f} s; loss -> request {requested_at - lost_at:.1f} s; request -> killed "
          f"{recorded_at - requested_at:.1f} s; new operator started -> writable "
          f"{writable - (restarted_at - lost_at):.1f} s; loss -> writable {writable:.1f} s, -> 3 voters {full:.1f} s "
          f"(request -> writable {writable - (requested_at - lost_at):.1f} s, -> 3 voters "
          f"{full - (requested_at - lost_at):.1f} s); {verdict.acknowledged} acknowledged writes read back, "
          f"{writer.failed} puts failed during the outage")
