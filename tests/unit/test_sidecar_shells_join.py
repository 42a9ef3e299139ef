"""The join shell through its ports: the quorum-loss round first, the restore before a bootstrap, and a
learner added under the membership lock's fence (in-memory fakes, tests/unit/sidecar_ports.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from raftset.sidecar.metrics import Metrics
from raftset.sidecar.shells.join import JoinShell
from tests.unit.sidecar_data import NAMING, member, mid, status
from tests.unit.sidecar_ports import FakeKube, FakePeers, FakeRaft, FakeVolume, fresh_state, settings, three_voters, workload

pytestmark = pytest.mark.unit


class Ports:
    """The two callables the join is given, writing down each call."""

    def __init__(self, quorum_loss: bool | None = None, restored: bool = True) -> None:
        self.calls: list[str] = []
        self.quorum_loss_answer, self.restored = quorum_loss, restored

    async def quorum_loss(self) -> bool | None:
        self.calls.append("quorum loss")
        return self.quorum_loss_answer

    async def restore(self) -> bool:
        self.calls.append("restore")
        return self.restored


def join_shell(tmp_path: Path, ordinal: int, raft: FakeRaft, replicas: int, ports: Ports) -> tuple[JoinShell, FakeVolume]:
    config = settings(ordinal, tmp_path)
    state = fresh_state(ordinal)
    volume = FakeVolume(state)
    wl = workload(replicas)
    shell = JoinShell(config, state, FakePeers(raft, config, wl), FakeKube(wl=wl), Metrics(), volume,  # type: ignore[arg-type]
                      asyncio.Event(), quorum_loss=ports.quorum_loss, restore=ports.restore)
    return shell, volume


async def test_a_new_pod_is_added_as_a_learner_under_the_lock_and_its_startup_file_written(tmp_path: Path) -> None:
    raft, ports = three_voters(), Ports()
    shell, volume = join_shell(tmp_path, 3, raft, 4, ports)
    assert await shell.round() is True
    assert ports.calls == ["quorum loss"]
    assert raft.calls == ["lock", "fence", f"add learner {NAMING.peer_url(3)}", "unlock"]
    added = raft.members[-1]
    assert volume.remembered == [(added.id, None)]
    assert [(s, sorted(c), force) for s, c, force in volume.startups] == \
        [("existing", ["demo-0", "demo-1", "demo-2", "demo-3"], False)]
    assert shell.state.phase == "started" and shell.state.startup_written


async def test_a_quorum_loss_round_that_concerns_the_pod_is_the_whole_round(tmp_path: Path) -> None:
    raft, ports = three_voters(), Ports(quorum_loss=False)
    shell, volume = join_shell(tmp_path, 3, raft, 4, ports)
    assert await shell.round() is False
    assert ports.calls == ["quorum loss"]
    assert raft.calls == [] and volume.startups == []


async def test_a_bootstrap_waits_for_the_restore_port_before_its_startup_file(tmp_path: Path) -> None:
    nobody = FakeRaft([], {})
    ports = Ports(restored=False)
    shell, volume = join_shell(tmp_path, 0, nobody, 3, ports)
    assert await shell.round() is False
    assert ports.calls == ["quorum loss", "restore"] and volume.startups == []
    ports.restored = True
    assert await shell.round() is True
    assert [(s, force) for s, _, force in volume.startups] == [("new", False)]


async def test_the_join_loop_runs_rounds_until_the_startup_file_is_written(tmp_path: Path) -> None:
    raft = FakeRaft([member(o) for o in range(3)], {mid(o): status(o) for o in range(3)})
    ports = Ports()
    shell, volume = join_shell(tmp_path, 3, raft, 4, ports)
    await asyncio.wait_for(shell.run(), 5)
    assert len(volume.startups) == 1 and shell.state.last_error == ""
