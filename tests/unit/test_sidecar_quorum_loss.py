"""The sidecar's quorum-loss step at join time (raftset.sidecar.pure.quorum_loss.decide), case by case,
and the move-aside that keeps what it moves."""

from __future__ import annotations

import dataclasses
import itertools
import os
from pathlib import Path

import pytest

from raftset.quorum_loss import QuorumLossRecord
from raftset.sidecar.io import datadir
from raftset.sidecar.pure.marker import Marker
from raftset.sidecar.pure.quorum_loss import QuorumLossAction, QuorumLossView, decide
from tests.unit.sidecar_data import NAMING, member, mid, status

pytestmark = pytest.mark.unit

RECORD = QuorumLossRecord(id="r1", survivor="demo-1", member_id=f"{mid(1):x}", started="", requested="auto")


def view(ordinal: int, *, record: QuorumLossRecord | None = RECORD, has_data: bool = True,
         marker_id: int | None = None, recovered: str = "", force: bool = True,
         members: list | None = None, peers: tuple = ()) -> QuorumLossView:
    own = mid(ordinal) if marker_id is None else marker_id
    return QuorumLossView(
        name=NAMING.pod(ordinal), peer_url=NAMING.peer_url(ordinal), record=record, has_data=has_data,
        marker=Marker(own, NAMING.pod(ordinal), NAMING.peer_url(ordinal), {}, recovered) if has_data else None,
        force_supported=force, survivor_members=members, peers=peers,
    )


def test_no_record_leaves_the_join_to_the_normal_steps() -> None:
    for ordinal, has_data in itertools.product(range(3), (True, False)):
        assert decide(view(ordinal, record=None, has_data=has_data)).action is QuorumLossAction.NONE


def test_the_survivor_starts_alone_once() -> None:
    assert decide(view(1)).action is QuorumLossAction.FORCE
    # Its marker says it already did, for this recovery: a restart is ordinary.
    assert decide(view(1, recovered="r1")).action is QuorumLossAction.NONE
    # For an older recovery it did not: this one forces again.
    assert decide(view(1, recovered="r0")).action is QuorumLossAction.FORCE


def test_the_survivor_refuses_what_it_cannot_do_and_changes_nothing() -> None:
    assert decide(view(1, force=False)).action is QuorumLossAction.REFUSE  # Xline: no force-new-cluster
    assert decide(view(1, has_data=False)).action is QuorumLossAction.REFUSE  # its data is gone
    refused = decide(view(1, marker_id=mid(7)))  # a data dir of another member
    assert refused.action is QuorumLossAction.REFUSE and f"{mid(7):x}" in refused.reason


def test_the_others_wait_until_the_survivor_answers_as_the_new_cluster() -> None:
    for ordinal, has_data in itertools.product((0, 2), (True, False)):
        assert decide(view(ordinal, has_data=has_data, members=None)).action is QuorumLossAction.WAIT


def test_data_the_new_cluster_dropped_is_moved_aside_and_then_the_normal_join_adds_a_learner() -> None:
    alone = [member(1)]
    assert decide(view(0, members=alone)).action is QuorumLossAction.MOVE_ASIDE
    assert decide(view(0, has_data=False, members=alone)).action is QuorumLossAction.NONE


def test_a_member_that_already_rejoined_the_new_cluster_restarts_as_usual() -> None:
    grown = [member(1), member(0, learner=True)]
    assert decide(view(0, members=grown)).action is QuorumLossAction.NONE
    # A data dir without a marker is recognised by its peer URL.
    bare = QuorumLossView(name=NAMING.pod(0), peer_url=NAMING.peer_url(0), record=RECORD, has_data=True,
                        marker=None, force_supported=True, survivor_members=grown, peers=())
    assert decide(bare).action is QuorumLossAction.NONE
    other = QuorumLossView(name=NAMING.pod(2), peer_url=NAMING.peer_url(2), record=RECORD, has_data=True,
                         marker=None, force_supported=True, survivor_members=grown, peers=())
    assert decide(other).action is QuorumLossAction.MOVE_ASIDE


def test_keep_aside_never_deletes(tmp_path: Path) -> None:
    data, marker_path = tmp_path / "data", tmp_path / "data.member.json"
    for round_ in range(3):
        data.mkdir()
        (data / "wal").write_text(f"round {round_}")
        marker_path.write_text("{}")
        dest = datadir.move_aside(str(data), str(marker_path), "quorum loss", keep_as=datadir.quorum_loss_name("r1"))
        assert not data.exists() and not marker_path.exists()
        assert Path(dest, "wal").read_text() == f"round {round_}"
        assert Path(f"{dest}.member.json").exists()
    kept = sorted(p for p in os.listdir(tmp_path) if not p.endswith(".member.json"))
    assert len(kept) == 3 and all(p.startswith("data.quorum-loss-r1") for p in kept)
    # The replace path's release (once a new member votes) leaves quorum-loss copies alone.
    assert datadir.release(str(data)) == []
    assert sorted(p for p in os.listdir(tmp_path) if not p.endswith(".member.json")) == kept


# --- issue 30, bug 1: the survivor asks its peers before it forces a new cluster

def test_the_survivor_refuses_to_force_while_a_peer_has_a_leader_at_its_term_or_later() -> None:
    """A majority that still has a leader is a cluster that commits: a forced one beside it splits it."""
    record = dataclasses.replace(RECORD, term=3)
    for peer_term in (3, 4, 9):
        leading = dataclasses.replace(status(0, leader=0), raft_term=peer_term)
        for peers in ((leading,), (status(2, leader=None), leading)):
            d = decide(view(1, record=record, peers=peers))
            assert d.action is QuorumLossAction.REFUSE, (peer_term, peers)
            assert "r1" in d.reason and f"term {peer_term}" in d.reason and "leader" in d.reason, d.reason
    # A follower's answer is evidence as good as the leader's own (the leader may not answer us).
    follower = dataclasses.replace(status(2, leader=0), raft_term=3)
    assert decide(view(1, record=record, peers=(follower,))).action is QuorumLossAction.REFUSE
    # A record written before the term was recorded (term 0): any leader refuses.
    assert decide(view(1, record=dataclasses.replace(RECORD, term=0), peers=(status(0, leader=0),))).action \
        is QuorumLossAction.REFUSE
    # Already started alone for this recovery: peers of the new cluster have a leader, nothing to refuse.
    assert decide(view(1, record=record, recovered="r1", peers=(follower,))).action is QuorumLossAction.NONE


def test_the_survivor_forces_when_no_peer_answers_or_none_has_a_leader_at_its_term() -> None:
    record = dataclasses.replace(RECORD, term=3)
    assert decide(view(1, record=record, peers=())).action is QuorumLossAction.FORCE  # nobody answers
    no_leader = (status(0, leader=None), status(2, leader=None))
    assert decide(view(1, record=record, peers=no_leader)).action is QuorumLossAction.FORCE
    older = (dataclasses.replace(status(0, leader=0), raft_term=2),)  # a leader it knew before the loss
    assert decide(view(1, record=record, peers=older)).action is QuorumLossAction.FORCE
