"""Issue 12: a survivor whose store does not answer is waited for, never recovered past.

A voter whose sidecar still renews its Lease while its store does not answer Status holds
data nobody can rank, so `auto` and the Automatic policy cannot know the most up-to-date
survivor: the operator reports QuorumLost with reason SurvivorsNotAnswering, naming it, and
starts nothing. Once the store answers, the recovery the policy asks for runs at once (its
grace period counted from the loss) and every acknowledged write is kept.

Real parts throughout: kube-apiserver, controllers, the operator, the sidecars and etcd
members run by the pod runner. The fault is real too: the survivor's store is SIGSTOPped
(its process runs, answers nothing) before the other two pods lose their nodes and disks.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from raftset import contract
from tests.e2e.test_fullstack import FAST, stack
from tests.e2e.test_repair import running_store
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import Operator
from tests.harness.quorum import lose_majority, recovered, survivor_kept, survivor_writing
from tests.harness.waiting import wait_for
from tools.devcluster.podrunner import PodRunner

pytestmark = pytest.mark.e2e

GRACE_SECONDS = 5  # spec.recovery.quorumLossGracePeriodSeconds: long past before the store answers
SILENT_SECONDS = 20  # how long the test watches the operator wait, four graces


@pytest.mark.parametrize("backend", ["StatefulSet"])
def test_a_survivor_that_does_not_answer_is_waited_for_then_recovered_from(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, backend: str,
        etcd: EngineUnderTest) -> None:
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    survivor_id, writer = survivor_writing(
        kv, backend, etcd.version, {"quorumLoss": "Automatic", "quorumLossGracePeriodSeconds": GRACE_SECONDS}, **FAST)
    try:
        pid, _ = running_store(runner, namespace, "kv-0")
        os.kill(pid, signal.SIGSTOP)
        try:
            lose_majority(kv, runner)

            def silent() -> dict[str, Any] | None:
                cond = kv.condition("QuorumLost")
                return cond if cond.get("reason") == "SurvivorsNotAnswering" else None
            cond = wait_for(silent, 90, "QuorumLost reason SurvivorsNotAnswering")
            print(f"while kv-0's store is stopped: {cond['message']}")
            assert cond["status"] == "True"
            assert f"kv-0 (member {survivor_id:x})" in cond["message"], cond
            assert "Not answering Status" in cond["message"] and "Automatic policy" in cond["message"], cond
            time.sleep(SILENT_SECONDS)  # the grace is long past: still nothing may start
            operator.rounds_pass(namespace, "kv")  # and the operator decided since
            assert kv.condition("QuorumLost").get("reason") == "SurvivorsNotAnswering"
            assert contract.ANNOTATION_QUORUM_RECOVERY not in (kv.workload()["metadata"].get("annotations") or {}), \
                "a recovery started while the survivor's data could not be ranked"
            reasons = [r for r, _ in kv.events()]
            assert "SurvivorsNotAnswering" in reasons and "QuorumRecoveryStarted" not in reasons, reasons
            acked_at_loss = writer.ok
        finally:
            os.kill(pid, signal.SIGCONT)
        answered_at = time.monotonic()
        started = wait_for(lambda: [m for r, m in kv.events() if r == "QuorumRecoveryStarted"], 60,
                           "the recovery started once kv-0 answers")[0]
        assert "(Automatic)" in started and "kv-0" in started, started
        writable, full = recovered(kv, writer, acked_at_loss, answered_at)
    finally:
        writer.stop()
    verdict = survivor_kept(kv, writer, survivor_id)
    print(f"quorum loss with the survivor's store stopped ({backend}, Automatic): store answers -> writable "
          f"{writable:.1f} s, -> 3 voters {full:.1f} s; {verdict.acknowledged} acknowledged writes read back")
