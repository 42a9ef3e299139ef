"""Heartbeat freshness from observed renewals (issue 11 f): the sidecar's clock never decides."""

from __future__ import annotations

from datetime import timedelta

import pytest

from raftset import contract
from raftset.operator.pure import planner
from raftset.operator.pure.freshness import Sighting, observe, token
from raftset.operator.pure.heartbeats import LEASE, SIGHTING, from_lease, from_observed
from raftset.workloads import STATEFULSET
from tests.unit.builders import NOW, lease, raft, raft_member

pytestmark = pytest.mark.unit

SKEWED = (NOW - timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_first_sighting_is_unconfirmed_and_observed_now() -> None:
    assert observe(None, "7", NOW) == Sighting("7", NOW, confirmed=False)


def test_the_same_token_again_is_not_a_renewal() -> None:
    first = observe(None, "7", NOW)
    assert observe(first, "7", NOW + timedelta(seconds=40)) is first


def test_a_changed_token_is_a_renewal_observed_now() -> None:
    later = NOW + timedelta(seconds=12)
    assert observe(observe(None, "7", NOW), "8", later) == Sighting("8", later, confirmed=True)


def test_token_is_the_resource_version_else_the_renew_time() -> None:
    body = lease(renew_time="2026-01-01T12:00:00Z")
    assert token(body) == "2026-01-01T12:00:00Z"
    body["metadata"]["resourceVersion"] = "42"
    assert token(body) == "42"
    assert token({}) == ""


@pytest.mark.parametrize("skew", [-3600, -60, 0, 60, 3600])
def test_a_renewal_observed_now_is_fresh_whatever_the_sidecars_clock_says(skew: int) -> None:
    renew = (NOW + timedelta(seconds=skew)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    sighting = Sighting("9", NOW, confirmed=True)
    record = from_lease(lease(renew_time=renew, duration=30), sighting)
    assert record is not None and record.fresh(NOW) and record.confirmed
    assert record.fresh(NOW + timedelta(seconds=29.9))
    assert not record.fresh(NOW + timedelta(seconds=30)), "no renewal observed for a whole duration: stale"


def test_a_clock_running_ahead_does_not_keep_a_dead_member_alive() -> None:
    ahead = (NOW + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    record = from_lease(lease(renew_time=ahead, duration=30), Sighting("9", NOW, confirmed=True))
    assert record is not None and not record.fresh(NOW + timedelta(seconds=31))


def test_renew_time_is_kept_for_display_only() -> None:
    record = from_lease(lease(renew_time=SKEWED), Sighting("9", NOW, confirmed=True))
    assert record is not None and record.renewed == NOW - timedelta(seconds=60)


def test_without_a_sighting_the_record_expires_from_its_own_renew_time() -> None:
    record = from_lease(lease(renew_time=SKEWED, duration=30))
    assert record is not None and record.confirmed and not record.fresh(NOW)


def test_from_observed_reads_index_entries() -> None:
    entries = [{LEASE: lease("demo-2", renew_time=SKEWED), SIGHTING: Sighting("1", NOW, True)},
               {LEASE: lease("demo-0", renew_time=SKEWED), SIGHTING: Sighting("2", NOW, False)},
               {LEASE: {}, SIGHTING: Sighting("3", NOW, True)},
               {LEASE: lease("demo-canary"), SIGHTING: Sighting("4", NOW, True)},
               {LEASE: lease("other-1"), SIGHTING: Sighting("5", NOW, True)}]
    records = from_observed(entries, "demo")
    assert [(r.ordinal, r.confirmed, r.fresh(NOW)) for r in records] == [(0, False, True), (2, True, True)]


def _records(confirmed: dict[int, bool], leader: int = 0, age: float = 0) -> list:
    out = []
    for ordinal, ok in confirmed.items():
        role = contract.ROLE_LEADER if ordinal == leader else contract.ROLE_FOLLOWER
        beat = {"member_id": f"{ordinal + 1:016x}", "name": f"demo-{ordinal}", "role": role, "healthy": True}
        record = from_lease(lease(f"demo-{ordinal}", beat, renew_time=SKEWED),
                            Sighting(str(ordinal), NOW - timedelta(seconds=age), ok))
        assert record is not None
        out.append(record)
    return out


def test_a_clock_60_s_behind_stalls_no_scale_in() -> None:
    """Before the fix every record here was stale by its renewTime: the plan waited for a leader."""
    members = _records({0: True, 1: True, 2: True})
    got = planner.plan("demo", STATEFULSET, 2, (3, ()), members, raft(raft_member(o) for o in (0, 1, 2)), NOW)
    assert got.action == "scale-in", got.message


def test_after_a_restart_no_step_is_taken_until_each_member_is_seen_renewed() -> None:
    members = _records({0: True, 1: False, 2: True})
    got = planner.plan("demo", STATEFULSET, 2, (3, ()), members, raft(raft_member(o) for o in (0, 1, 2)), NOW)
    assert got.action == "wait" and "demo-1" in got.message and got.replicas == 3
    got = planner.plan("demo", STATEFULSET, 4, (3, ()), members, raft(raft_member(o) for o in (0, 1, 2)), NOW)
    assert got.action == "wait" and got.replicas == 3


def test_an_unrenewed_first_sighting_expires_and_then_counts_as_dead() -> None:
    """A member dead across an operator restart: first seen, never renewed, stale after one duration;
    the others renewed meanwhile, so the planner acts again, on a true view."""
    later = NOW + timedelta(seconds=30)
    members = [m if m.ordinal == 2 else from_lease(
        lease(m.pod, {"member_id": m.member_id, "role": m.role, "healthy": True}), Sighting("x", later, True))
        for m in _records({0: True, 1: True, 2: False})]
    assert "demo-2" in (planner.awaiting_renewal(members, NOW) or "")
    assert planner.awaiting_renewal(members, later) is None
    assert [m.ordinal for m in members if not m.fresh(later)] == [2]
    got = planner.plan("demo", STATEFULSET, 2, (3, ()), members, raft(raft_member(o) for o in (0, 1, 2)), later)
    assert got.action == "scale-in" and got.scale_away == ("demo-2",), got.message
