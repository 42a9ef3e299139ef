"""The membership shell through its ports: the leader publishes the membership Lease (owned by the
cluster object) with every member's index lag, on change only; not leading, it forgets (in-memory fakes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftset import contract
from raftset.sidecar.metrics import Metrics
from raftset.sidecar.shells.membership import MembershipShell
from tests.unit.sidecar_data import member, mid, status
from tests.unit.sidecar_ports import FakeKube, FakePeers, FakeRaft, fresh_state, settings, workload

pytestmark = pytest.mark.unit

OWNER = {"apiVersion": "raftset.dev/v1alpha1", "kind": "EtcdCluster", "name": "demo", "uid": "c-uid"}


def membership_shell(tmp_path: Path, raft: FakeRaft) -> tuple[MembershipShell, FakeKube]:
    config = settings(0, tmp_path)
    kube = FakeKube()
    state = fresh_state(0, phase="started", startup_written=True, status=raft.statuses[mid(0)], cluster_owner=OWNER)
    return MembershipShell(config, state, FakePeers(raft, config, workload(3)), kube, Metrics()), kube  # type: ignore[arg-type]


async def test_the_leader_publishes_the_membership_with_index_lags_once_per_change(tmp_path: Path) -> None:
    raft = FakeRaft([member(o) for o in range(3)], {mid(0): status(0, applied=100), mid(1): status(1, applied=90),
                                                   mid(2): None})
    shell, kube = membership_shell(tmp_path, raft)
    await shell.round()
    name = contract.membership_lease_name("demo")
    assert kube.writes == [f"lease {name}"]
    assert kube.leases[name]["metadata"]["ownerReferences"] == [OWNER]
    assert shell.state.index_lags == {"demo-0": 0, "demo-1": 10}
    await shell.round()
    assert kube.writes == [f"lease {name}"], "an unchanged membership was written again"


async def test_not_leading_forgets_the_lags_and_publishes_at_once_when_leading_again(tmp_path: Path) -> None:
    raft = FakeRaft([member(o) for o in range(3)], {mid(o): status(o) for o in range(3)})
    shell, kube = membership_shell(tmp_path, raft)
    await shell.round()
    shell.not_leading()
    assert shell.state.index_lags == {}
    await shell.round()
    assert len(kube.writes) == 2
