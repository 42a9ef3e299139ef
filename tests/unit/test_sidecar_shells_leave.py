"""The leave shell through its ports: a pod scaled away removes its own member under the lock's fence and
deletes its heartbeat Lease; a pod that is only restarting leaves Raft alone (in-memory fakes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raftset import contract
from raftset.sidecar.metrics import Metrics
from raftset.sidecar.shells.leave import LeaveShell
from tests.unit.sidecar_data import mid
from tests.unit.sidecar_ports import FakeKube, FakePeers, FakeRaft, fresh_state, settings, three_voters, workload

pytestmark = pytest.mark.unit


def pod(name: str, *, terminating: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


def leave_shell(tmp_path: Path, raft: FakeRaft, replicas: int, *, terminating: bool) -> tuple[LeaveShell, FakeKube]:
    config = settings(2, tmp_path)
    kube = FakeKube(pods={"demo-2": pod("demo-2", terminating=terminating)})
    kube.leases[contract.lease_name("demo-2")] = {"metadata": {"name": contract.lease_name("demo-2")}}
    state = fresh_state(2, phase="started", startup_written=True, member_id=mid(2), status=raft.statuses[mid(2)])
    wl = workload(replicas)
    return LeaveShell(config, state, FakePeers(raft, config, wl), kube, Metrics()), kube  # type: ignore[arg-type]


async def test_a_pod_scaled_away_removes_its_member_under_the_fence_and_its_lease(tmp_path: Path) -> None:
    raft = three_voters()
    shell, kube = leave_shell(tmp_path, raft, 2, terminating=True)
    result = await shell.leave("preStop")
    assert result["action"] == "removed" and result["removed"] is True and result["trigger"] == "preStop"
    assert raft.calls == ["lock", "fence", f"remove {mid(2):x}", "unlock"]
    assert shell.state.phase == "left"
    assert kube.writes == [f"delete lease {contract.lease_name('demo-2')}"]


async def test_a_restarting_pod_keeps_its_member(tmp_path: Path) -> None:
    raft = three_voters()
    shell, kube = leave_shell(tmp_path, raft, 3, terminating=True)
    result = await shell.leave("SIGTERM")
    assert result["action"] == "kept" and raft.calls == [] and shell.state.phase == "leaving"
    assert kube.writes == []


async def test_a_pod_not_terminating_does_nothing(tmp_path: Path) -> None:
    raft = three_voters()
    shell, _ = leave_shell(tmp_path, raft, 2, terminating=False)
    first = await shell.leave("preStop")
    assert first["action"] == "none" and raft.calls == [] and shell.state.phase == "started"


async def test_a_restarting_leader_hands_off_to_a_member_whose_pod_is_not_terminating(tmp_path: Path) -> None:
    raft = three_voters(leader=2)
    shell, kube = leave_shell(tmp_path, raft, 3, terminating=True)
    kube.pods.update({"demo-0": pod("demo-0", terminating=False), "demo-1": pod("demo-1", terminating=True)})
    result = await shell.leave("preStop")
    assert result["moved_leader_to"] == f"{mid(0):x}" and raft.calls == [f"move leader {mid(0):x}"]


async def test_a_leader_whose_peers_all_terminate_stops_without_a_hand_off(tmp_path: Path) -> None:
    """A lights-out: every pod deleted at once; a hand-off to a terminating member only delays every stop."""
    raft = three_voters(leader=2)
    shell, kube = leave_shell(tmp_path, raft, 3, terminating=True)
    kube.pods.update({"demo-0": pod("demo-0", terminating=True), "demo-1": pod("demo-1", terminating=True)})
    result = await shell.leave("preStop")
    assert result["moved_leader_to"] is None and raft.calls == [] and "terminating" in result["reason"]
