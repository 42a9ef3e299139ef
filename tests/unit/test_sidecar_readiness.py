"""Readiness: a started voter that sees a leader and serves a linearizable read, nothing less."""

from __future__ import annotations

import pytest

from raftset.sidecar.io.etcdclient import Status
from raftset.sidecar.pure.readiness import (
    NOT_READ_YET, Readiness, Reading, announcement, behind, readiness, remember, worth_a_read)
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


def test_a_member_that_applied_what_the_cluster_had_committed_a_while_ago_is_ready() -> None:
    readings = (Reading(0.0, 100), Reading(10.0, 150), Reading(31.0, 300))
    assert behind(readings, own_revision=100, now=31.0) is None  # caught up with the reading 31 s old
    assert behind(readings, own_revision=299, now=41.0) is None
    assert behind(readings, own_revision=0, now=29.0) is None, "no reading is old enough to judge by yet"


def test_a_member_that_applies_nothing_while_the_cluster_moves_on_is_not_ready_and_says_how_far_behind() -> None:
    readings = (Reading(0.0, 100), Reading(10.0, 150), Reading(31.0, 300))
    lag = behind(readings, own_revision=149, now=41.0)
    assert lag == "it has applied up to revision 149, and the cluster had reached revision 150 31s ago"
    assert readiness("started", VOTER, None, lag) == Readiness(False, f"behind the cluster: {lag}")
    # A stuck member that a quiet cluster did not leave behind is as good as the others.
    assert behind((Reading(0.0, 100), Reading(40.0, 100)), own_revision=100, now=40.0) is None


def test_only_the_readings_a_verdict_may_still_need_are_kept() -> None:
    readings: tuple[Reading, ...] = ()
    for second in range(0, 100, 2):
        readings = remember(readings, Reading(float(second), second))
    assert readings[0] == Reading(68.0, 68)  # the newest at least CATCH_UP_S old at 98 s
    assert len(readings) == 16
    assert behind(readings, own_revision=67, now=98.0) is not None
    assert behind(readings, own_revision=68, now=98.0) is None


def test_only_the_reads_own_verdicts_are_announced_and_a_first_read_is_no_recovery() -> None:
    read_failed = readiness("started", VOTER, "timed out")
    lagging = readiness("started", VOTER, None, "it has applied up to revision 1, and the cluster had reached revision 9 30s ago")
    ready, first = readiness("started", VOTER, None), readiness("started", VOTER, NOT_READ_YET)
    assert announcement(ready, read_failed) == (True, "not ready: a linearizable read failed: timed out")
    assert announcement(read_failed, read_failed) is None
    assert announcement(ready, lagging) == (True, f"not ready: {lagging.reason}")
    assert announcement(lagging, ready) is not None and announcement(lagging, ready)[0] is False
    assert announcement(read_failed, ready) is not None
    assert announcement(first, ready) is None
    assert announcement(ready, readiness("started", None, None)) is None  # Status's verdict: not ours
