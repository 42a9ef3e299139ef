"""Readiness: a started voter that sees a leader and serves a linearizable read, nothing less."""

from __future__ import annotations

import pytest

from raftset.sidecar.io.etcdclient import Status
from raftset.sidecar.pure.readiness import NOT_READ_YET, Readiness, readiness, worth_a_read
from tests.unit.sidecar_data import status

pytestmark = pytest.mark.unit

VOTER = status(1)


def test_a_started_voter_with_a_leader_whose_read_went_through_is_ready() -> None:
    assert readiness("started", VOTER, None) == Readiness(True, "")


@pytest.mark.parametrize(("read_error", "reason"), [
    (NOT_READ_YET, "a linearizable read failed: " + NOT_READ_YET),
    ("Range at http://demo-1:2379: timed out", "a linearizable read failed: Range at http://demo-1:2379: timed out"),
])
def test_a_voter_that_sees_a_leader_but_cannot_read_is_not_ready_and_says_why(read_error: str, reason: str) -> None:
    assert readiness("started", VOTER, read_error) == Readiness(False, reason)


@pytest.mark.parametrize(("phase", "member", "reason"), [
    ("joining", VOTER, "the sidecar is joining"),
    ("leaving", VOTER, "the sidecar is leaving"),
    ("left", VOTER, "the sidecar is left"),
    ("started", None, "the store does not answer Status"),
    ("started", status(1, learner=True), "a learner, not a voter yet"),
    ("started", status(1, leader=None), "no leader"),
    ("started", status(1, errors=("NOSPACE",)), "the store reports: NOSPACE"),
])
def test_without_a_voting_member_that_sees_a_leader_a_good_read_is_not_enough(
        phase: str, member: Status | None, reason: str) -> None:
    assert readiness(phase, member, None) == Readiness(False, reason)
    assert not worth_a_read(phase, member), "no read is tried where it could not make the member ready"


def test_a_read_is_tried_exactly_where_it_decides_readiness() -> None:
    assert worth_a_read("started", VOTER)
    assert readiness("started", VOTER, None).ready != readiness("started", VOTER, "refused").ready
