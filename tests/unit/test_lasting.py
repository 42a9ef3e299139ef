"""Membership disagreements: one Warning each once they outlast a step in flight, never more."""

from __future__ import annotations

from datetime import timedelta

import pytest

from raftset.operator.pure import lasting
from tests.unit.builders import NOW

pytestmark = pytest.mark.unit

LEFT = "demo-1 reports member 0000000000000002, which Raft does not list"
JOINING = "demo-3 runs no Raft member"
GRACE = timedelta(seconds=120)


def test_a_disagreement_is_announced_once_after_the_grace() -> None:
    seen, due = lasting.track({}, [LEFT], NOW, GRACE)
    assert due == [] and seen[LEFT].since == NOW
    seen, due = lasting.track(seen, [LEFT], NOW + GRACE - timedelta(seconds=1), GRACE)
    assert due == []
    seen, due = lasting.track(seen, [LEFT], NOW + GRACE, GRACE)
    assert due == [LEFT]
    seen, due = lasting.track(seen, [LEFT], NOW + 10 * GRACE, GRACE)
    assert due == [], "announced once"


def test_one_that_goes_away_in_time_is_never_announced_and_starts_afresh_if_it_returns() -> None:
    seen, _ = lasting.track({}, [JOINING], NOW, GRACE)
    seen, due = lasting.track(seen, [], NOW + timedelta(seconds=5), GRACE)
    assert seen == {} and due == []
    seen, due = lasting.track(seen, [JOINING], NOW + GRACE, GRACE)
    assert due == [] and seen[JOINING].since == NOW + GRACE


def test_each_disagreement_has_its_own_clock() -> None:
    seen, _ = lasting.track({}, [LEFT], NOW, GRACE)
    later = NOW + timedelta(seconds=60)
    seen, _ = lasting.track(seen, [LEFT, JOINING], later, GRACE)
    seen, due = lasting.track(seen, [LEFT, JOINING], NOW + GRACE, GRACE)
    assert due == [LEFT]
    _, due = lasting.track(seen, [LEFT, JOINING], later + GRACE, GRACE)
    assert due == [JOINING]


def test_the_event_is_a_warning_that_says_how_long() -> None:
    assert lasting.event(LEFT, timedelta(seconds=125)) == ("Warning", lasting.REASON, f"for 125 s: {LEFT}")
