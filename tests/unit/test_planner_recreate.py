"""A workload deleted and re-created under a running cluster keeps its members' ordinals (issue 11 g)."""

from __future__ import annotations

import pytest

from raftset.operator.pure.planner import plan
from raftset.workloads import ADVANCED_STATEFULSET, STATEFULSET, kept_ordinals
from tests.unit.builders import CLUSTER, NOW, member, members, raft, raft_member

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("ordinals", "reserved"), [
    ((0, 2, 3), (1,)),
    ((1, 2), (0,)),
    ((0, 3, 5), (1, 2, 4)),
    ((0, 1, 2), ()),
    ((4,), (0, 1, 2, 3)),
])
@pytest.mark.parametrize("desired", [1, 3, 5])
def test_a_recreated_advanced_statefulset_keeps_its_holes(ordinals: tuple[int, ...], reserved: tuple[int, ...],
                                                          desired: int) -> None:
    """Before the fix this created `desired` pods 0..desired-1: a new member in each hole, and
    the members above the holes gone with their pods."""
    membership = raft([raft_member(o) for o in ordinals], leader=ordinals[0])
    got = plan(CLUSTER, ADVANCED_STATEFULSET, desired, None, members(ordinals, ordinals[0]), membership, NOW)
    assert (got.action, got.replicas, got.reserved) == ("create", len(ordinals), reserved)
    assert got.kept == list(ordinals)
    assert "re-creating" in got.message


def test_raft_decides_over_the_heartbeats() -> None:
    """A member that left Raft but whose Lease lingers gets no pod back; a never-started learner does."""
    membership = raft([raft_member(0), raft_member(2, learner=True, started=False)], leader=0)
    records = members((0, 1), 0)
    got = plan(CLUSTER, ADVANCED_STATEFULSET, 3, None, records, membership, NOW)
    assert (got.replicas, got.reserved, got.kept) == (2, (1,), [0, 2])


def test_without_a_published_membership_the_heartbeats_stale_ones_included_name_the_ordinals() -> None:
    records = [member(0, age=600), member(3, age=600)]
    got = plan(CLUSTER, ADVANCED_STATEFULSET, 3, None, records, None, NOW)
    assert (got.replicas, got.reserved) == (2, (1, 2))


def test_the_builtin_statefulset_cannot_hold_holes_and_says_so() -> None:
    membership = raft([raft_member(o) for o in (0, 2)], leader=0)
    got = plan(CLUSTER, STATEFULSET, 3, None, [], membership, NOW)
    assert (got.replicas, got.reserved) == (2, ())
    assert "cannot hold holes" in got.message
    got = plan(CLUSTER, STATEFULSET, 3, None, [], raft([raft_member(o) for o in (0, 1)]), NOW)
    assert (got.replicas, got.reserved) == (2, ()) and "cannot hold" not in got.message


@pytest.mark.parametrize("backend", [STATEFULSET, ADVANCED_STATEFULSET])
def test_a_new_cluster_still_starts_at_full_size(backend: object) -> None:
    got = plan(CLUSTER, backend, 5, None, [], None, NOW)  # type: ignore[arg-type]
    assert (got.action, got.replicas, got.reserved) == ("create", 5, ())
    assert got.kept == kept_ordinals(5)
