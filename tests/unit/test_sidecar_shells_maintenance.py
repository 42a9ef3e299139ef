"""The maintenance shell through its ports: every voter's sidecar reads the alarms into the shared State
(the replace shell and the metrics read them there); a learner, which etcd refuses Alarm, forgets them."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftset.sidecar.metrics import Metrics
from raftset.sidecar.pure.etcd import Alarm, AlarmKind
from raftset.sidecar.shells.maintenance import MaintenanceShell
from tests.unit.sidecar_data import mid, status
from tests.unit.sidecar_ports import FakeKube, FakePeers, FakeRaft, fresh_state, settings, three_voters, workload

pytestmark = pytest.mark.unit


def maintenance_shell(tmp_path: Path, raft: FakeRaft) -> MaintenanceShell:
    config = settings(1, tmp_path)
    state = fresh_state(1, phase="started", startup_written=True, member_id=mid(1), status=raft.statuses[mid(1)])
    return MaintenanceShell(config, state, FakePeers(raft, config, workload(3)), FakeKube(), Metrics())  # type: ignore[arg-type]


async def test_a_follower_reads_its_own_and_the_clusters_alarms_into_the_state(tmp_path: Path) -> None:
    raft = three_voters()
    raft.alarms = [Alarm(mid(1), AlarmKind.NOSPACE), Alarm(mid(2), AlarmKind.CORRUPT)]
    shell = maintenance_shell(tmp_path, raft)
    await shell.round()
    assert shell.state.alarms == ("NOSPACE",)
    assert shell.state.cluster_alarms == tuple(raft.alarms)
    assert raft.calls == [], "a follower's sidecar acted on an alarm"


async def test_a_learner_forgets_the_alarms(tmp_path: Path) -> None:
    raft = three_voters()
    raft.statuses[mid(1)] = status(1, learner=True)
    raft.alarms = [Alarm(mid(1), AlarmKind.NOSPACE)]
    shell = maintenance_shell(tmp_path, raft)
    shell.state.alarms = ("NOSPACE",)
    await shell.round()
    assert shell.state.alarms == () and shell.state.cluster_alarms == ()
