"""The promote shell through its ports: a learner polls (publish-now) and asks to vote through MemberList;
a voter asks nothing (in-memory fakes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftset.sidecar.metrics import Metrics
from raftset.sidecar.pure import promotion
from raftset.sidecar.shells.promotion import PromotionShell
from tests.unit.sidecar_data import member, mid, status
from tests.unit.sidecar_ports import FakePeers, FakeRaft, fresh_state, settings, workload

pytestmark = pytest.mark.unit


def promotion_shell(tmp_path: Path, raft: FakeRaft, published: list[str]) -> PromotionShell:
    config = settings(3, tmp_path)

    async def publish_now() -> None:
        published.append("publish")

    state = fresh_state(3, phase="started", startup_written=True, status=raft.statuses[mid(3)])
    return PromotionShell(config, state, FakePeers(raft, config, workload(4)), Metrics(),  # type: ignore[arg-type]
                          publish_now=publish_now)


async def test_a_learner_in_sync_is_promoted_and_published_at_once(tmp_path: Path) -> None:
    raft = FakeRaft([member(0), member(1), member(2), member(3, learner=True)],
                    {mid(o): status(o, learner=o == 3) for o in range(4)})
    published: list[str] = []
    shell = promotion_shell(tmp_path, raft, published)
    assert await shell.round() == 0.0
    assert raft.calls == [f"promote {mid(3):x}"]
    assert published == ["publish", "publish"]  # the poll at the promote pace, then the new voter at once


async def test_a_refused_promotion_backs_off_and_changes_nothing(tmp_path: Path) -> None:
    raft = FakeRaft([member(0), member(1), member(2), member(3, learner=True)],
                    {mid(o): status(o, learner=o == 3) for o in range(4)})
    raft.refuse["MemberPromote"] = "etcdserver: can only promote a learner member which is in sync with leader"
    shell = promotion_shell(tmp_path, raft, [])
    assert await shell.round() > 0.0
    assert raft.calls == [] and raft.members[3].is_learner


async def test_a_voter_asks_nothing(tmp_path: Path) -> None:
    raft = FakeRaft([member(o) for o in range(4)], {mid(o): status(o) for o in range(4)})
    published: list[str] = []
    shell = promotion_shell(tmp_path, raft, published)
    assert await shell.round() == promotion.VOTER_CAP_S
    assert raft.calls == [] and published == []
