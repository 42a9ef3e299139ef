"""The heartbeat shell through its ports: a poll sets the shared State, the Lease is written on change
only, and a failed linearizable read makes the member not ready (in-memory fakes)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from raftset import contract
from raftset.sidecar.metrics import Metrics
from raftset.sidecar.pure.readiness import CATCH_UP_S, Reading
from raftset.sidecar.shells.heartbeat import HeartbeatShell
from tests.unit.sidecar_data import mid
from tests.unit.sidecar_ports import FakeKube, FakePeers, FakeRaft, FakeVolume, fresh_state, settings, three_voters, workload

pytestmark = pytest.mark.unit

LEASE = f"lease {contract.lease_name('demo-1')}"


def heartbeat_shell(tmp_path: Path, raft: FakeRaft) -> tuple[HeartbeatShell, FakeKube, FakeVolume]:
    config = settings(1, tmp_path)
    state = fresh_state(1, phase="started", startup_written=True)
    kube, volume = FakeKube(), FakeVolume(state)
    shell = HeartbeatShell(config, state, FakePeers(raft, config, workload(3)), kube, Metrics(), volume)  # type: ignore[arg-type]
    return shell, kube, volume


async def test_a_poll_sets_the_state_remembers_the_member_and_publishes_once(tmp_path: Path) -> None:
    shell, kube, volume = heartbeat_shell(tmp_path, three_voters())
    await shell.round()
    state = shell.state
    assert state.status is not None and state.member_id == mid(1) and volume.remembered == [(mid(1), None)]
    assert state.ready and state.read_error is None
    # the Lease before the read (not ready yet), the label, the Lease again with the read's verdict
    assert kube.writes == [LEASE, "label demo-1", LEASE]
    assert kube.labels["demo-1"] == {contract.LABEL_ROLE: "follower"}
    assert state.heartbeat_written_at is not None
    await shell.round()
    assert kube.writes == [LEASE, "label demo-1", LEASE], "an unchanged heartbeat was written again"


async def test_a_failed_linearizable_read_makes_the_member_not_ready_with_its_reason(tmp_path: Path) -> None:
    raft = three_voters()
    raft.refuse["Range"] = "etcdserver: request timed out"
    shell, kube, _ = heartbeat_shell(tmp_path, raft)
    await shell.round()
    assert shell.state.read_error is not None and "timed out" in shell.state.read_error
    assert not shell.state.ready
    assert not shell.state.heartbeat.ready and "linearizable read failed" in shell.state.heartbeat.ready_reason
    assert kube.writes.count(LEASE) == 1  # not ready before the read and after it: one write


async def test_a_member_that_applied_nothing_since_a_while_ago_is_not_ready_until_it_catches_up(tmp_path: Path) -> None:
    raft = three_voters()
    shell, _, _ = heartbeat_shell(tmp_path, raft)
    raft.revision, raft.applied[shell.settings.client_url] = 500, 120
    shell.state.readings = (Reading(time.monotonic() - CATCH_UP_S - 1, 130),)
    await shell.round()
    assert shell.state.read_error is None and not shell.state.ready
    assert shell.state.heartbeat.ready_reason.startswith(
        "behind the cluster: it has applied up to revision 120, and the cluster had reached revision 130")
    raft.applied[shell.settings.client_url] = 130
    await shell.round()
    assert shell.state.ready


async def test_a_store_that_does_not_answer_leaves_no_status(tmp_path: Path) -> None:
    shell, kube, volume = heartbeat_shell(tmp_path, three_voters(down=[1]))
    await shell.round()
    assert shell.state.status is None and volume.remembered == []
    assert not shell.state.ready and shell.state.heartbeat.role == "unknown"
