"""The operator's leader election: what a replica does with the Lease it read."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from raftset.operator import election
from raftset.operator.election import Action, Record, Timing, decide

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def held(by: str, ago: float, duration: float = 15) -> Record:
    return Record(holder=by, renewed=NOW - timedelta(seconds=ago), duration=duration, transitions=3)


def test_no_lease_is_created() -> None:
    assert decide(None, "a", NOW) is Action.CREATE


def test_our_own_lease_is_renewed_even_when_late() -> None:
    assert decide(held("a", 1), "a", NOW) is Action.RENEW
    assert decide(held("a", 60), "a", NOW) is Action.RENEW


@pytest.mark.parametrize("ago,expected", [(0, Action.WAIT), (14.9, Action.WAIT), (15, Action.WAIT),
                                          (15.1, Action.TAKE), (120, Action.TAKE)])
def test_another_holder_is_waited_for_until_its_lease_expires(ago: float, expected: Action) -> None:
    assert decide(held("b", ago), "a", NOW) is expected


def test_the_holders_own_duration_counts_not_ours() -> None:
    assert decide(held("b", 20, duration=30), "a", NOW) is Action.WAIT


@pytest.mark.parametrize("record", [Record(None, NOW, 15), Record("", NOW, 15), Record("b", None, 15)])
def test_a_released_or_never_renewed_lease_is_free(record: Record) -> None:
    assert decide(record, "a", NOW) is Action.TAKE


def test_a_take_over_counts_a_transition_and_stamps_the_acquire_time() -> None:
    spec = election.lease_spec("a", NOW, Timing(), held("b", 30))
    assert (spec.holder_identity, spec.lease_transitions, spec.acquire_time) == ("a", 4, NOW)
    assert spec.lease_duration_seconds == 15 and spec.renew_time == NOW


def test_a_renewal_is_no_transition() -> None:
    spec = election.lease_spec("a", NOW, Timing(), held("a", 1))
    assert (spec.lease_transitions, spec.acquire_time) == (3, None)


def test_the_first_holder_starts_at_zero_transitions() -> None:
    assert election.lease_spec("a", NOW, Timing(), None).lease_transitions == 0


@pytest.mark.parametrize("values", [(15, 10, 0), (15, 10, 10), (10, 10, 2), (5, 10, 2)])
def test_timings_must_leave_room_to_renew_before_expiry(values: tuple[float, float, float]) -> None:
    with pytest.raises(ValueError, match="retry_period < renew_deadline < lease_duration"):
        Timing(*values)
