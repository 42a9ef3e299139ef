"""The quorum-loss shell through its ports: the survivor forces a new cluster from its data only when no
peer it reaches has a leader, then settles (marker first, then an ordinary startup file); a refusal is told
once in an Event (in-memory fakes)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from raftset import contract
from raftset.quorum_loss import QuorumLossRecord
from raftset.sidecar.io import marker
from raftset.sidecar.pure.marker import Marker
from raftset.sidecar.shells.quorum_loss import QuorumLossShell
from tests.unit.sidecar_data import mid, status
from tests.unit.sidecar_ports import FakeKube, FakePeers, FakeRaft, FakeVolume, fresh_state, settings, three_voters, workload

pytestmark = pytest.mark.unit

RECORD = QuorumLossRecord(id="r1", survivor="demo-1", member_id=f"{mid(1):x}", started="2026-01-01T00:00:00Z",
                          requested="auto", term=3)


def quorum_loss_shell(tmp_path: Path, raft: FakeRaft, *, record: QuorumLossRecord | None = RECORD
                      ) -> tuple[QuorumLossShell, FakeKube, FakeVolume]:
    config = settings(1, tmp_path)
    (tmp_path / "data" / "member").mkdir(parents=True)
    marker.write(config.marker_path, Marker(mid(1), "demo-1", config.peer_url))
    annotations = {contract.ANNOTATION_QUORUM_RECOVERY: record.to_json()} if record else {}
    wl = workload(3, **annotations)
    kube, state = FakeKube(wl=wl), fresh_state(1)
    volume = FakeVolume(state)
    shell = QuorumLossShell(config, state, FakePeers(raft, config, wl), kube, volume,  # type: ignore[arg-type]
                            asyncio.Event())
    return shell, kube, volume


async def test_no_record_leaves_the_round_to_the_join(tmp_path: Path) -> None:
    shell, _, volume = quorum_loss_shell(tmp_path, three_voters(), record=None)
    assert await shell.before_join() is None
    assert volume.startups == [] and shell.forced is None


async def test_the_survivor_forces_when_no_peer_has_a_leader_then_settles_as_an_ordinary_member(tmp_path: Path) -> None:
    raft = three_voters(down=[0, 1, 2])
    shell, _, volume = quorum_loss_shell(tmp_path, raft)
    assert await shell.before_join() is True
    assert volume.startups == [("existing", {"demo-1": shell.settings.peer_url}, True)] and shell.forced == RECORD
    raft.statuses[mid(1)] = status(1, leader=1)  # the forced store leads alone
    await asyncio.wait_for(shell.settle(), 5)
    assert volume.remembered == [(mid(1), "r1")], "the marker records the recovery before the startup file loses the flag"
    assert volume.startups[-1] == ("existing", {"demo-1": shell.settings.peer_url}, False) and shell.forced is None


async def test_a_peer_with_a_leader_refuses_the_force_and_tells_it_once(tmp_path: Path) -> None:
    raft = three_voters(down=[1])  # demo-0 and demo-2 still have a leader at term 3
    shell, kube, volume = quorum_loss_shell(tmp_path, raft)
    assert await shell.before_join() is False
    assert await shell.before_join() is False
    assert volume.startups == [] and shell.forced is None
    assert [e["reason"] for e in kube.events] == ["QuorumRecoveryRefused"]
    assert "Raft still has a leader" in shell.state.last_error
