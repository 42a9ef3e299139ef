"""Heartbeat Leases read into Members: good records, and everything a Lease may hold instead."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from raftset import contract
from raftset.operator.pure.heartbeats import NO_VERDICT, from_lease, from_leases
from tests.unit.builders import NOW, heartbeat, lease

pytestmark = pytest.mark.unit


def test_a_good_lease() -> None:
    got = from_lease(lease("demo-2", heartbeat(contract.ROLE_LEADER, member_id="ab12", pod="demo-2"),
                           duration=40))
    assert got is not None
    assert (got.pod, got.ordinal, got.member_id, got.role, got.healthy) == ("demo-2", 2, "ab12", "leader", True)
    assert got.renewed == NOW and got.renewed.tzinfo is not None
    assert got.expires == NOW + timedelta(seconds=40)
    assert got.voting


@pytest.mark.parametrize(("role", "voting"), [
    ("leader", True), ("follower", True), ("learner", False), ("unknown", False),
])
def test_roles_and_voting(role: str, voting: bool) -> None:
    got = from_lease(lease(beat=heartbeat(role)))
    assert got is not None and got.role == role and got.voting is voting


@pytest.mark.parametrize("role", ["LEADER", "candidate", "", None, 3, ["leader"]])
def test_an_unknown_role_reads_as_unknown_and_never_votes(role: object) -> None:
    got = from_lease(lease(beat={**heartbeat(), "role": role}))
    assert got is not None and got.role == contract.ROLE_UNKNOWN and not got.voting


@pytest.mark.parametrize(("raw", "healthy"), [(True, True), (False, False), (None, False)])
def test_healthy_flag(raw: object, healthy: bool) -> None:
    beat = {**heartbeat(), "healthy": raw}
    if raw is None:
        del beat["healthy"]
    got = from_lease(lease(beat=beat))
    assert got is not None and got.healthy is healthy


def test_a_readiness_verdict_is_read_with_its_reason() -> None:
    got = from_lease(lease(beat={**heartbeat(), "ready": False, "ready_reason": "a linearizable read failed: x"}))
    assert got is not None and (got.healthy, got.ready, got.ready_reason) == (True, False, "a linearizable read failed: x")
    ready = from_lease(lease(beat={**heartbeat(), "ready": True, "ready_reason": ""}))
    assert ready is not None and (ready.ready, ready.ready_reason) == (True, "")


@pytest.mark.parametrize("raw", [None, "true", 1, [True], {}])
def test_a_record_without_a_readiness_verdict_is_not_serving_and_says_why(raw: object) -> None:
    """A sidecar older than the verdict (or anything else) wrote no `ready: true`: no evidence that a
    read commits, so it does not count towards Available; its Status health is read as before."""
    beat = {**heartbeat(), "ready": raw}
    if raw is None:
        del beat["ready"]
    got = from_lease(lease(beat=beat))
    assert got is not None and got.healthy and not got.ready
    assert got.ready_reason == NO_VERDICT


def test_a_missing_member_id_is_an_empty_string() -> None:
    beat = heartbeat()
    del beat["member_id"]
    got = from_lease(lease(beat=beat))
    assert got is not None and got.member_id == ""


@pytest.mark.parametrize(("renew_time", "expected"), [
    ("2026-01-01T12:00:00.000000Z", NOW),
    ("2026-01-01T12:00:00Z", NOW),
    ("2026-01-01T12:00:00+00:00", NOW),
    ("2026-01-01T14:00:00+02:00", NOW),
    ("2026-01-01T12:00:00", NOW),  # no zone: read as UTC
])
def test_renew_time_formats(renew_time: str, expected: datetime) -> None:
    got = from_lease(lease(renew_time=renew_time))
    assert got is not None and got.renewed == expected


@pytest.mark.parametrize(("duration", "seconds"), [(15, 15), (None, 30), (0, 30), ("45", 45)])
def test_lease_duration(duration: object, seconds: int) -> None:
    got = from_lease(lease(duration=duration))
    assert got is not None and got.expires - got.renewed == timedelta(seconds=seconds)


def _without_annotation() -> dict:
    obj = lease()
    del obj["metadata"]["annotations"][contract.ANNOTATION_HEARTBEAT]
    return obj


def _without_metadata() -> dict:
    obj = lease()
    del obj["metadata"]
    return obj


UNREADABLE = {
    "missing annotation": _without_annotation(),
    "no metadata": _without_metadata(),
    "empty annotation": lease(beat=""),
    "bad JSON": lease(beat="{not json"),
    "JSON list": lease(beat="[1, 2]"),
    "JSON string": lease(beat='"leader"'),
    "JSON null": lease(beat="null"),
    "JSON number": lease(beat="3"),
    "no holder": lease(holder=None),
    "empty holder": lease(holder=""),
    "non-ordinal holder": lease("demo-abc"),
    "holder without dash": lease("demo"),
    "holder with trailing dash": lease("demo-"),
    "holder not a string": lease(holder=7),
    "no renewTime": lease(renew_time=None),
    "bad renewTime": lease(renew_time="yesterday"),
    "renewTime not a string": lease(renew_time=1767268800),
    "bad duration": lease(duration="thirty"),
    "no spec": {"metadata": {"annotations": {contract.ANNOTATION_HEARTBEAT: "{}"}}},
    "empty object": {},
}


@pytest.mark.parametrize("obj", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_an_unreadable_lease_is_no_record_not_an_exception(obj: dict) -> None:
    assert from_lease(obj) is None


@pytest.mark.parametrize(("age", "duration", "fresh"), [
    (0, 30, True), (29.999, 30, True), (30, 30, False), (31, 30, False),
    (-5, 30, True),  # a clock slightly ahead of ours
    (100, 120, True), (120, 120, False),
])
def test_freshness(age: float, duration: int, fresh: bool) -> None:
    renewed = NOW - timedelta(seconds=age)
    got = from_lease(lease(renew_time=renewed.isoformat(), duration=duration))
    assert got is not None and got.fresh(NOW) is fresh


def test_from_leases_skips_unreadable_and_sorts_by_ordinal() -> None:
    leases = [lease("demo-10"), UNREADABLE["bad JSON"], lease("demo-2"), lease("demo-0"),
              UNREADABLE["non-ordinal holder"]]
    assert [m.ordinal for m in from_leases(leases)] == [0, 2, 10]
    assert from_leases([]) == []


def test_members_compare_by_value() -> None:
    """Frozen records: the planner's determinism relies on equal inputs comparing equal."""
    a, b = from_lease(lease("demo-1")), from_lease(lease("demo-1"))
    assert a == b and hash(a) == hash(b)
    assert a.renewed.tzinfo == timezone.utc
