"""The join decision: bootstrap, add as learner, reuse, rejoin, stale data, wait."""

from __future__ import annotations

import pytest

from raftset.sidecar.pure.join import JoinAction, JoinView, cluster_evidence, decide, initial_cluster, rejoin_cluster
from raftset.sidecar.pure.marker import Marker
from tests.unit.sidecar_data import NAMING, member, mid

pytestmark = pytest.mark.unit


def view(ordinal: int = 1, *, kept=(0, 1, 2), has_data: bool = False, marker: Marker | None = None,
         members=None, evidence: bool = True, linearizable: bool = True, local: int | None = None) -> JoinView:
    return JoinView(name=NAMING.pod(ordinal), ordinal=ordinal, peer_url=NAMING.peer_url(ordinal), kept=list(kept),
                    has_data=has_data, marker=marker, members=members, cluster_evidence=evidence,
                    linearizable=linearizable, local_member=local)


def mark(ordinal: int, member_id: int | None = None) -> Marker:
    return Marker(mid(ordinal) if member_id is None else member_id, NAMING.pod(ordinal), NAMING.peer_url(ordinal))


def test_first_ordinal_of_a_new_cluster_bootstraps() -> None:
    assert decide(view(0, evidence=False)).action is JoinAction.BOOTSTRAP


def test_first_kept_ordinal_bootstraps_even_when_it_is_not_zero() -> None:
    assert decide(view(3, kept=(3, 4), evidence=False)).action is JoinAction.BOOTSTRAP


@pytest.mark.parametrize("ordinal", [1, 2])
def test_other_ordinals_of_a_new_cluster_wait_for_the_first(ordinal: int) -> None:
    plan = decide(view(ordinal, evidence=False))
    assert plan.action is JoinAction.WAIT and "ordinal 0" in plan.reason


def test_first_ordinal_never_bootstraps_when_the_cluster_exists_but_does_not_answer() -> None:
    # Split brain guard: heartbeat records say a cluster exists.
    plan = decide(view(0, evidence=True))
    assert plan.action is JoinAction.WAIT and "none answered" in plan.reason


def test_a_new_member_is_added_as_learner() -> None:
    assert decide(view(1, members=[member(0)])).action is JoinAction.ADD_LEARNER


def test_ordinal_zero_without_data_in_a_running_cluster_joins_as_learner() -> None:
    assert decide(view(0, members=[member(1), member(2)])).action is JoinAction.ADD_LEARNER


@pytest.mark.parametrize("pending", [member(2, learner=True), member(2, learner=True, started=False),
                                     member(2, started=False)])
def test_one_membership_change_at_a_time(pending) -> None:
    plan = decide(view(1, members=[member(0), pending]))
    assert plan.action is JoinAction.WAIT and "still joining" in plan.reason


def test_an_unstarted_entry_with_our_peer_url_is_reused() -> None:
    plan = decide(view(1, members=[member(0), member(1, learner=True, started=False)]))
    assert (plan.action, plan.member_id) == (JoinAction.REUSE_ENTRY, mid(1))


def test_a_started_entry_with_our_peer_url_but_no_data_is_removed_first() -> None:
    plan = decide(view(1, members=[member(0), member(1), member(2)]))
    assert (plan.action, plan.member_id) == (JoinAction.REMOVE_ENTRY, mid(1))


def test_data_of_a_current_member_rejoins() -> None:
    plan = decide(view(1, has_data=True, marker=mark(1), members=[member(0), member(1), member(2)]))
    assert (plan.action, plan.member_id) == (JoinAction.REJOIN, mid(1))


def test_data_of_a_current_learner_rejoins_and_is_promoted_later() -> None:
    plan = decide(view(1, has_data=True, marker=mark(1), members=[member(0), member(1, learner=True)]))
    assert plan.action is JoinAction.REJOIN


def test_data_without_any_member_answering_rejoins_whole_cluster_restart() -> None:
    assert decide(view(2, has_data=True, marker=mark(2), members=None)).action is JoinAction.REJOIN
    assert decide(view(0, has_data=True, marker=None, members=None, evidence=False)).action is JoinAction.REJOIN


def test_stale_data_dir_of_a_removed_member_is_moved_aside() -> None:
    plan = decide(view(2, has_data=True, marker=mark(2), members=[member(0), member(1)]))
    assert plan.action is JoinAction.MOVE_ASIDE and "no longer in the cluster" in plan.reason


def test_stale_data_dir_when_our_url_was_re_added_under_a_new_id() -> None:
    fresh = member(2, learner=True, started=False, member_id=0xBEEF)
    plan = decide(view(2, has_data=True, marker=mark(2), members=[member(0), member(1), fresh]))
    assert plan.action is JoinAction.MOVE_ASIDE
    # After moving aside the same cluster state reuses the fresh entry.
    again = decide(view(2, has_data=False, marker=None, members=[member(0), member(1), fresh]))
    assert (again.action, again.member_id) == (JoinAction.REUSE_ENTRY, 0xBEEF)


def test_data_without_marker_rejoins_when_started_under_our_name() -> None:
    assert decide(view(1, has_data=True, members=[member(0), member(1)])).action is JoinAction.REJOIN


def test_data_without_marker_and_no_entry_is_stale() -> None:
    assert decide(view(1, has_data=True, members=[member(0)])).action is JoinAction.MOVE_ASIDE


def test_initial_cluster_lists_every_member_and_names_unstarted_ones_by_pod() -> None:
    members = [member(0), member(1), member(3, learner=True, started=False)]
    got = initial_cluster(NAMING.pod(3), NAMING.peer_url(3), members, NAMING, mid(3))
    assert got == {"demo-0": NAMING.peer_url(0), "demo-1": NAMING.peer_url(1), "demo-3": NAMING.peer_url(3)}
    other_unstarted = [member(0), member(4, started=False)]
    got = initial_cluster(NAMING.pod(3), NAMING.peer_url(3), other_unstarted, NAMING, None)
    assert got == {"demo-0": NAMING.peer_url(0), "demo-4": NAMING.peer_url(4), "demo-3": NAMING.peer_url(3)}


def test_initial_cluster_of_a_foreign_unstarted_member_uses_its_id() -> None:
    foreign = member(0)
    odd = type(foreign)(id=0xABC, name="", peer_urls=("http://10.9.9.9:2380",), client_urls=(), is_learner=True)
    got = initial_cluster("demo-1", NAMING.peer_url(1), [foreign, odd], NAMING, None)
    assert got["member-abc"] == "http://10.9.9.9:2380"


def test_a_rejoin_starts_with_the_live_membership_when_a_member_answered() -> None:
    members = [member(0), member(1), member(2)]
    cluster = rejoin_cluster(view(1, has_data=True, members=members), mid(1), NAMING)
    assert cluster == {NAMING.pod(o): NAMING.peer_url(o) for o in range(3)}


def test_a_rejoin_without_answers_starts_with_the_markers_map() -> None:
    recorded = {NAMING.pod(0): NAMING.peer_url(0), NAMING.pod(1): NAMING.peer_url(1)}
    marker = Marker(mid(1), NAMING.pod(1), NAMING.peer_url(1), recorded)
    assert rejoin_cluster(view(1, has_data=True, marker=marker), mid(1), NAMING) == recorded


def test_a_rejoin_with_neither_starts_alone() -> None:
    assert rejoin_cluster(view(1, has_data=True, marker=mark(1)), None, NAMING) == {NAMING.pod(1): NAMING.peer_url(1)}


# Fault b: data moves aside, and an entry is removed, only on a linearizable answer; a member
# whose store runs is never moved aside nor removed by its own sidecar.

def test_a_lagging_members_list_never_moves_data_aside() -> None:
    # A member that has not applied our MemberAdd yet answers without us.
    plan = decide(view(1, has_data=True, marker=mark(1), members=[member(0), member(2)], linearizable=False))
    assert plan.action is JoinAction.WAIT and "linearizable" in plan.reason


def test_a_lagging_members_list_never_removes_our_entry() -> None:
    plan = decide(view(1, members=[member(0), member(1)], linearizable=False))
    assert plan.action is JoinAction.WAIT and "linearizable" in plan.reason


def test_a_non_linearizable_list_still_lets_a_member_rejoin_or_add() -> None:
    assert decide(view(1, has_data=True, marker=mark(1), members=[member(0), member(1)],
                       linearizable=False)).action is JoinAction.REJOIN
    assert decide(view(1, members=[member(0)], linearizable=False)).action is JoinAction.ADD_LEARNER


def test_a_running_store_is_kept_even_when_a_list_omits_it() -> None:
    # Our store answers Status as member mid(1): whatever the marker says, its data stays.
    plan = decide(view(1, has_data=True, marker=mark(1, member_id=99), members=[member(0), member(1)], local=mid(1)))
    assert (plan.action, plan.member_id) == (JoinAction.REJOIN, mid(1))


def test_a_running_store_whose_member_was_removed_is_waited_for_not_moved() -> None:
    plan = decide(view(1, has_data=True, marker=mark(1), members=[member(0), member(2)], local=mid(1)))
    assert plan.action is JoinAction.WAIT and "still runs" in plan.reason


def test_an_empty_data_dir_under_a_running_store_never_removes_its_entry() -> None:
    plan = decide(view(1, members=[member(0), member(1)], local=mid(1)))
    assert plan.action is JoinAction.REJOIN


def test_only_another_pods_heartbeat_lease_is_evidence_of_a_cluster() -> None:
    def lease(holder: str | None) -> dict:
        return {"spec": {"holderIdentity": holder} if holder is not None else {}}

    assert not cluster_evidence([], "demo-0")
    assert not cluster_evidence([lease("demo-0"), lease(None), {}], "demo-0")  # our own, or nobody's
    assert cluster_evidence([lease("demo-0"), lease("demo-1")], "demo-0")
