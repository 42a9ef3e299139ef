"""Issue 30, bug 1, through the whole stack: Leases refused by the API are no quorum loss.

The live reproduction: `Automatic` with a 10 s grace, the heartbeat Lease writes of the leader
and of one follower refused by the API through an admission policy while Raft kept committing.
The operator reported QuorumLost after 31 s, restarted all three pods, forced a new cluster
from the third member (member IDs changed, 129 of 938 writes failed) and the cluster was not
Available 180 s after the writes were allowed again.

Real parts throughout: kube-apiserver with its workload controllers, the operator, the real
sidecars and etcd members run by the pod runner, and a real ValidatingAdmissionPolicy.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from raftset import contract
from tests.e2e.test_fullstack import FAST, stack
from tests.harness.checker import Writer, check
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import Operator
from tests.harness.quorum import lease_writes_refused
from tests.harness.waiting import wait_for
from tools.devcluster.podrunner import PodRunner

pytestmark = pytest.mark.e2e

GRACE_SECONDS = 10
WATCH_SECONDS = 120


def test_the_leaders_and_a_followers_leases_refused_by_the_api_start_no_recovery(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, etcd: EngineUnderTest) -> None:
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(3, workloadKind="AdvancedStatefulSet", version=etcd.version, storage={"size": "1Gi"},
              recovery={"quorumLoss": "Automatic", "quorumLossGracePeriodSeconds": GRACE_SECONDS}, **FAST)
    kv.wait_healthy(0, 1, 2)
    ids = {m.name: m.id for m in kv.members(0, 1, 2)}
    pods = {p.metadata.name: p.metadata.uid for p in kv.pod_objects()}
    writer = Writer([kv.url(o) for o in (0, 1, 2)])
    writer.start()
    verdicts: list[str] = []
    try:
        wait_for(lambda: writer.ok > 100, 60, "the writer running")
        leader = kv.leader(0, 1, 2)
        assert leader is not None
        silenced = [leader, next(o for o in (0, 1, 2) if o != leader)]
        [witness] = [o for o in (0, 1, 2) if o not in silenced]
        with lease_writes_refused(kv.api, namespace, [f"kv-{o}" for o in silenced]):
            # The operator ran rounds on the stale Leases: no heartbeat of the leader is fresh.
            wait_for(lambda: kv.condition("Available").get("reason") == "NoLeader", 60,
                     "the operator seeing the leader's Lease stale (Available reason NoLeader)")
            deadline = time.monotonic() + WATCH_SECONDS
            while time.monotonic() < deadline:
                cond = kv.condition("QuorumLost")
                verdicts.append(f"{cond.get('status')} {cond.get('reason')}: {cond.get('message')}")
                assert cond.get("status") != "True", f"quorum loss claimed on a healthy cluster: {cond}"
                assert contract.ANNOTATION_QUORUM_RECOVERY not in (kv.workload()["metadata"].get("annotations")
                                                                   or {}), "a recovery started"
                now = {p.metadata.name: p.metadata.uid for p in kv.pod_objects()
                       if p.metadata.deletion_timestamp is None}
                assert now == pods, f"pods deleted: {pods} -> {now}"
                time.sleep(2)
            assert any(f"kv-{witness}" in v and "sees a leader" in v for v in verdicts), verdicts[-3:]
        written = writer.ok
        wait_for(lambda: writer.ok > written + 50, 60, "the writer writing after the Leases are allowed again")
    finally:
        writer.stop()
    print(f"with the Leases of {silenced} refused for {WATCH_SECONDS} s: {verdicts[-1]}")
    reasons = [r for r, _ in kv.events()]
    assert "QuorumRecoveryStarted" not in reasons and "QuorumLost" not in reasons, reasons
    assert {m.name: m.id for m in kv.members(0, 1, 2)} == ids, "member IDs changed"
    verdict = asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked))
    assert verdict.acknowledged == len(writer.acked) > 100
    assert writer.failed == 0, writer.errors[-3:]
