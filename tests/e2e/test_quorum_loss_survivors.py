"""Issue 24, item 8: after a quorum loss with two survivors, the operator restarts the more
up-to-date one alone, even where it is not the lowest ordinal, and keeps every acknowledged write.

Five members; kv-0's store is frozen (SIGSTOP) while a writer puts keys through the others, so
kv-0 falls behind; kv-3 is let catch up with the leader; then kv-1, kv-2 and kv-4 lose their
nodes and disks at once and kv-0 is thawed. No leader is left, so kv-0 cannot catch up: the two
survivors' logs differ, and ranking by ordinal would lose writes. Real parts throughout (the
operator, the workload controllers, sidecars and etcd members run by the pod runner).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest
from kubernetes import client

from raftset.etcdclient import MemberClient
from tests.e2e.test_fullstack import FAST, stack
from tests.e2e.test_repair import running_store
from tests.harness.checker import Writer, check
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import Operator
from tests.harness.waiting import wait_for
from tools.devcluster.podrunner import PodRunner

pytestmark = pytest.mark.e2e

ALL = (0, 1, 2, 3, 4)
LOST = ("kv-1", "kv-2", "kv-4")
WRITES = 1500


def test_of_two_survivors_the_more_up_to_date_one_restarts_alone_not_the_lowest_ordinal(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, etcd: EngineUnderTest) -> None:
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(5, workloadKind="StatefulSet", version=etcd.version, storage={"size": "1Gi"},
              recovery={"quorumLoss": "Automatic", "quorumLossGracePeriodSeconds": 5}, **FAST)
    kv.wait_healthy(*ALL)
    kv.move_leader(1, *ALL)  # a leader that will be lost, not the survivor kv-0 would wait on
    ids = {m.name: m.id for m in kv.members(*ALL)}

    async def index(ordinal: int) -> int:
        async with MemberClient(kv.url(ordinal), timeout=3) as member:
            return (await member.status()).raft_index

    frozen, _ = running_store(runner, namespace, "kv-0")
    os.kill(frozen, signal.SIGSTOP)
    try:
        writer = Writer([kv.url(o) for o in (1, 2, 3, 4)])
        writer.start()
        try:
            # More puts than the leader keeps in flight to a silent follower (etcd's raft: 256
            # appends): a thawed kv-0 reads what its socket buffers hold, and no more.
            wait_for(lambda: writer.ok > WRITES, 120, "the writer running without kv-0")
        finally:
            writer.stop()
        # kv-3 holds every acknowledged write: its log reaches the leader's commit index.
        wait_for(lambda: (leader := kv.leader(1, 2, 3, 4)) is not None
                 and asyncio.run(index(3)) >= asyncio.run(index(leader)), 30, "kv-3 caught up with the leader")
        core = client.CoreV1Api(kv.api)
        for name in LOST:  # at once: their nodes and disks are gone
            core.delete_namespaced_pod(name, namespace)
            runner.lose(namespace, name)
    finally:
        os.kill(frozen, signal.SIGCONT)
    lost_at = time.monotonic()
    behind, ahead = asyncio.run(index(0)), asyncio.run(index(3))
    assert behind < ahead, f"kv-0 ({behind}) must be behind kv-3 ({ahead}) for the choice to matter"

    started = wait_for(lambda: [m for r, m in kv.events() if r == "QuorumRecoveryStarted"], 120,
                       "the recovery started")
    assert len(started) == 1 and f"kv-3 (member {ids['kv-3']:x})" in started[0], started
    assert "kv-0" in started[0], f"the Event lists both survivors it ranked: {started[0]}"
    wait_for(lambda: kv.condition("QuorumLost").get("reason") == "Recovered", 300, "every member votes again")
    kv.wait_healthy(*ALL)
    recovered = time.monotonic() - lost_at
    members = {m.name: m.id for m in kv.members(*ALL) if m.started and not m.is_learner}
    assert len(members) == 5 and members["kv-3"] == ids["kv-3"], members
    assert members["kv-0"] != ids["kv-0"], "the stale survivor rejoined as a new member, its data moved aside"
    verdict = asyncio.run(check([kv.url(o) for o in ALL], writer.acked))
    assert verdict.acknowledged == len(writer.acked) > WRITES
    print(f"quorum loss, 2 survivors of 5 (kv-0 at index {behind}, kv-3 at {ahead}): kv-3 chosen; 5 voters again "
          f"{recovered:.1f} s after the loss; {verdict.acknowledged} acknowledged writes read back")
