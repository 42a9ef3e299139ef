"""What each engine's etcd API does differently, and the decisions that read it."""

from __future__ import annotations

import dataclasses

import pytest

from raftset.engines import ETCD, XLINE
from raftset.sidecar.io.etcdclient import Member, Refusal, with_lost_names
from raftset.sidecar.pure import join
from tests.unit.sidecar_data import NAMING, member, mid

pytestmark = pytest.mark.unit


def test_xline_differences_are_recorded_as_capabilities() -> None:
    etcd, xline = ETCD.capabilities, XLINE.capabilities
    # etcd is the reference: everything true.
    assert all(v for k, v in vars(etcd).items() if k not in ("refusal_texts", "corruption_texts"))
    # Xline, as measured (docs/engines.md): everything differs.
    assert not any(v for k, v in vars(xline).items() if k not in ("refusal_texts", "corruption_texts"))


@pytest.mark.parametrize(("message", "refusal"), [
    # Xline (crates/curp/src/rpc/mod.rs)
    ("Learner not caught up error: The learner has not caught up.", Refusal.LEARNER_NOT_READY),
    ("Node not found error: The specified node does not exist.", Refusal.MEMBER_NOT_FOUND),
    ("Node already exists error: The node already exists.", Refusal.MEMBER_EXISTS),
    ("etcdserver: no leader", Refusal.NO_LEADER),
    # etcd
    ("etcdserver: can only promote a learner member which is in sync with leader", Refusal.LEARNER_NOT_READY),
    ("etcdserver: member not found", Refusal.MEMBER_NOT_FOUND),
    ("Wrong cluster version error: The cluster version is incorrect.", Refusal.OTHER),
])
def test_refusals_are_recognised_in_either_engines_words(message: str, refusal: Refusal) -> None:
    assert Refusal.of(message) is refusal


def _view(members) -> join.JoinView:
    return join.JoinView(name="demo-3", ordinal=3, peer_url=NAMING.peer_url(3), kept=[0, 1, 2, 3],
                         has_data=False, marker=None, members=members, cluster_evidence=True)


def test_a_second_learner_waits_even_where_the_engine_would_accept_it() -> None:
    """Xline accepts several learners: the sidecar's own check holds one change at a time."""
    members = [member(0), member(1), member(2), member(4, learner=True)]
    plan = join.decide(_view(members))
    assert plan.action is join.JoinAction.WAIT and "still joining" in plan.reason


def test_an_entry_with_our_peer_url_is_reused_never_added_twice() -> None:
    """Xline accepts a duplicate peer URL: MemberList by peer URL decides before MemberAdd."""
    unstarted = member(3, started=False, learner=True)
    plan = join.decide(_view([member(0), member(1), member(2), unstarted]))
    assert plan.action is join.JoinAction.REUSE_ENTRY and plan.member_id == mid(3)


def test_a_voter_whose_engine_lost_its_name_reads_as_the_pod_its_peer_url_belongs_to() -> None:
    """Xline (keeps_joined_names False) can list a joined, running voter as never started, for good."""
    lost = member(2, started=False)  # a voter: name and client URLs blanked by the engine
    unstarted = member(3, learner=True, started=False)  # a learner that has not started: left alone
    stranger = Member(id=0x99, name="", peer_urls=("http://elsewhere:2380",), client_urls=(), is_learner=False)
    read = with_lost_names([member(0), lost, unstarted, stranger], NAMING.advertised)
    assert read == [member(0), member(2), unstarted, stranger]
    assert read[1].started and not read[2].started and not read[3].started


def test_pods_are_found_by_their_advertised_peer_url() -> None:
    assert NAMING.advertised((NAMING.peer_url(4),)) == (NAMING.pod(4), NAMING.client_url(4))
    assert NAMING.advertised(("http://elsewhere:2380", NAMING.peer_url(1))) == (NAMING.pod(1), NAMING.client_url(1))
    assert NAMING.advertised(("http://elsewhere:2380",)) is None


def test_join_does_not_wait_on_a_voter_whose_name_the_engine_lost() -> None:
    """The two-joiners flake on Xline: the second joiner waited for good on the first, a voter listed
    without a name; read as the sidecar reads MemberList, it is a started voter and the join goes on."""
    listed = [member(0), member(1), member(2, started=False)]
    view = join.JoinView(name=NAMING.pod(3), ordinal=3, peer_url=NAMING.peer_url(3), kept=[0, 1, 2, 3],
                         has_data=False, marker=None, members=listed, cluster_evidence=True, linearizable=True,
                         bootstrap_alone=False, formed=True)
    assert join.decide(view).action is join.JoinAction.WAIT  # as Xline lists it: "still joining"
    restored = dataclasses.replace(view, members=with_lost_names(listed, NAMING.advertised))
    assert join.decide(restored).action is join.JoinAction.ADD_LEARNER
