"""The join decision of an engine that cannot bootstrap alone (Xline): the initial set bootstraps
together while no cluster exists; a formed cluster is only ever grown by MemberAdd."""

from __future__ import annotations

import json

import pytest

from raftset import contract
from raftset.engines import ETCD, XLINE
from raftset.sidecar.pure.etcd import Member
from raftset.sidecar.pure.join import JoinAction, JoinView, bootstrap_cluster, cluster_formed, decide
from raftset.sidecar.pure.marker import Marker
from tests.unit.sidecar_data import NAMING, member, mid, status

pytestmark = pytest.mark.unit


def view(ordinal: int = 1, *, kept=(0, 1, 2), alone: bool = False, has_data: bool = False,
         marker: Marker | None = None, members=None, evidence: bool = False, formed: bool = False,
         linearizable: bool = False, local: int | None = None) -> JoinView:
    return JoinView(name=NAMING.pod(ordinal), ordinal=ordinal, peer_url=NAMING.peer_url(ordinal), kept=list(kept),
                    has_data=has_data, marker=marker, members=members, cluster_evidence=evidence,
                    linearizable=linearizable, local_member=local, bootstrap_alone=alone,
                    initial_peers={} if alone else NAMING.initial_cluster(kept), formed=formed)


def initial(*ordinals: int, started: bool = True) -> list:
    return [member(o, started=started) for o in ordinals]


def lease(ordinal: int, **beat: object) -> dict:
    doc = {"member_id": "", "role": "unknown", "healthy": False, "raft_index": 0, **beat}
    return {"metadata": {"annotations": {contract.ANNOTATION_HEARTBEAT: json.dumps(doc)}},
            "spec": {"holderIdentity": NAMING.pod(ordinal)}}


def test_the_capability_says_which_engine_bootstraps_alone() -> None:
    assert ETCD.capabilities.bootstrap_alone and not XLINE.capabilities.bootstrap_alone


def test_naming_lists_every_initial_member_by_pod_name() -> None:
    assert NAMING.initial_cluster([2, 0, 1]) == {f"demo-{o}": NAMING.peer_url(o) for o in range(3)}


# ---- a cluster that does not exist yet


@pytest.mark.parametrize("ordinal", [0, 1, 2])
def test_every_initial_member_bootstraps_with_the_whole_initial_set(ordinal: int) -> None:
    v = view(ordinal)
    plan = decide(v)
    assert plan.action is JoinAction.BOOTSTRAP and "demo-0, demo-1, demo-2 bootstrap together" in plan.reason
    assert bootstrap_cluster(v) == {f"demo-{o}": NAMING.peer_url(o) for o in range(3)}


def test_the_initial_set_is_the_kept_ordinals_even_when_they_do_not_start_at_zero() -> None:
    v = view(4, kept=(3, 4))
    assert decide(v).action is JoinAction.BOOTSTRAP
    assert bootstrap_cluster(v) == {"demo-3": NAMING.peer_url(3), "demo-4": NAMING.peer_url(4)}


def test_an_initial_member_bootstraps_while_the_others_answer_but_never_had_a_leader() -> None:
    # demo-0 bootstrapped first: its store answers MemberList naming every initial member (measured
    # on Xline: client URLs only for the started ones), no leader yet.
    unstarted = [m.__class__(m.id, m.name, m.peer_urls, (), False) for m in initial(1, 2)]
    for others in (initial(0, 1, 2), [member(0), *unstarted]):
        plan = decide(view(2, members=others, evidence=True))
        assert plan.action is JoinAction.BOOTSTRAP, (others, plan)


def test_a_single_replica_bootstraps_alone_because_its_initial_set_is_itself() -> None:
    v = view(0, kept=(0,))
    assert decide(v).action is JoinAction.BOOTSTRAP
    assert bootstrap_cluster(v) == {"demo-0": NAMING.peer_url(0)}


# ---- a cluster that exists


def test_a_formed_cluster_is_joined_never_bootstrapped_again() -> None:
    # demo-0 and demo-1 formed it; demo-2's pod comes late: its unstarted initial entry is reused.
    members = [member(0), member(1), member(2, started=False)]
    plan = decide(view(2, members=members, evidence=True, formed=True, linearizable=True))
    assert (plan.action, plan.member_id) == (JoinAction.REUSE_ENTRY, mid(2))


def test_a_late_initial_member_listed_by_name_but_never_run_reuses_its_entry_instead_of_removing_it() -> None:
    # As Xline lists an initial member whose store never ran: named, without client URLs (measured).
    # Removing it would be a membership change Xline replays badly in every member added later
    # (docs/engines.md: the panic at curp_node.rs:718).
    never_ran = Member(mid(2), NAMING.pod(2), (NAMING.peer_url(2),), (), False)
    assert not never_ran.started
    plan = decide(view(2, members=[member(0), member(1), never_ran], evidence=True, formed=True, linearizable=True))
    assert (plan.action, plan.member_id) == (JoinAction.REUSE_ENTRY, mid(2))


def test_an_initial_member_that_lost_its_data_after_the_cluster_formed_never_bootstraps() -> None:
    members = initial(0, 1, 2)
    plan = decide(view(1, members=members, evidence=True, formed=True))
    assert plan.action is JoinAction.WAIT and "linearizable" in plan.reason  # REMOVE_ENTRY needs the leader's view
    plan = decide(view(1, members=members, evidence=True, formed=True, linearizable=True))
    assert (plan.action, plan.member_id) == (JoinAction.REMOVE_ENTRY, mid(1))


def test_a_marker_without_data_means_the_member_ran_and_never_bootstraps_again() -> None:
    ran = Marker(mid(1), "demo-1", NAMING.peer_url(1))
    assert decide(view(1, marker=ran)).action is JoinAction.WAIT
    assert decide(view(1, marker=ran, members=initial(0, 1, 2), evidence=True)).action is JoinAction.WAIT


def test_heartbeats_of_a_silent_cluster_make_everyone_wait() -> None:
    plan = decide(view(0, evidence=True))
    assert plan.action is JoinAction.WAIT and "none answered" in plan.reason


def test_without_any_sign_a_member_outside_the_initial_set_waits() -> None:
    plan = decide(view(3, kept=(0, 1, 2)))
    assert plan.action is JoinAction.WAIT and "may not bootstrap" in plan.reason


def test_an_unformed_cluster_is_joined_with_the_set_it_lists_not_what_the_workload_keeps_now() -> None:
    # The workload was scaled while the cluster formed: the first to bootstrap chose the set.
    v = view(1, kept=(0, 1, 2, 3), members=initial(0, 1, 2), evidence=True)
    plan = decide(v)
    assert plan.action is JoinAction.BOOTSTRAP and "demo-0, demo-1, demo-2 bootstrap together" in plan.reason
    assert bootstrap_cluster(v) == {f"demo-{o}": NAMING.peer_url(o) for o in range(3)}
    assert bootstrap_cluster(view(1, kept=(0, 1), members=initial(0, 1, 2))) == bootstrap_cluster(v)


@pytest.mark.parametrize("members", [initial(0, 1, 2), [member(0), member(1), member(3, learner=True)],
                                     [member(0), member(3, started=False)]])
def test_a_member_an_unformed_cluster_does_not_list_waits_for_it_to_form(members) -> None:
    plan = decide(view(3, kept=(0, 1, 2, 3), members=members, evidence=True))
    assert plan.action is JoinAction.WAIT and "not formed yet" in plan.reason


def test_a_running_cluster_grows_by_member_add() -> None:
    plan = decide(view(3, kept=(0, 1, 2, 3), members=initial(0, 1, 2), evidence=True, formed=True,
                       linearizable=True))
    assert plan.action is JoinAction.ADD_LEARNER


# ---- restarts with data, and a store that runs


@pytest.mark.parametrize("members", [None, initial(0, 1, 2)])
@pytest.mark.parametrize("formed", [False, True])
def test_an_initial_member_with_data_rejoins(members, formed: bool) -> None:
    plan = decide(view(1, has_data=True, marker=Marker(mid(1), "demo-1", NAMING.peer_url(1)), members=members,
                       evidence=True, formed=formed))
    assert plan.action is JoinAction.REJOIN


def test_a_store_that_runs_is_kept_before_anything_else() -> None:
    assert decide(view(1, local=mid(1))).action is JoinAction.REJOIN


# ---- the etcd way is unchanged


def test_an_engine_that_bootstraps_alone_starts_the_first_ordinal_alone() -> None:
    v = view(0, alone=True)
    assert decide(v).action is JoinAction.BOOTSTRAP and bootstrap_cluster(v) == {"demo-0": NAMING.peer_url(0)}
    assert decide(view(1, alone=True)).action is JoinAction.WAIT
    assert decide(view(1, alone=True, members=[member(0)], linearizable=True)).action is JoinAction.ADD_LEARNER


# ---- the evidence that a cluster formed


def test_a_status_with_a_leader_or_a_committed_entry_means_formed() -> None:
    assert not cluster_formed([], "demo-1", [])
    assert not cluster_formed([], "demo-1", [status(0, leader=None, applied=0)])
    assert cluster_formed([], "demo-1", [status(0, leader=0, applied=0)])
    assert cluster_formed([], "demo-1", [status(0, leader=None, applied=5)])


def test_a_heartbeat_lease_of_another_member_that_was_healthy_or_committed_means_formed() -> None:
    assert not cluster_formed([lease(0), lease(2)], "demo-1", [])
    assert cluster_formed([lease(0, healthy=True)], "demo-1", [])
    assert cluster_formed([lease(0, raft_index=7)], "demo-1", [])
    assert not cluster_formed([lease(1, healthy=True)], "demo-1", [])  # our own says nothing about the others


def test_an_unreadable_heartbeat_counts_as_formed() -> None:
    broken = {"metadata": {"annotations": {contract.ANNOTATION_HEARTBEAT: "{"}}, "spec": {"holderIdentity": "demo-0"}}
    assert cluster_formed([broken], "demo-1", [])
