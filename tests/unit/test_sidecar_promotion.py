"""The promote loop's pace: fast while the member is not voting yet, capped while etcd refuses."""

from __future__ import annotations

import pytest

from raftset.sidecar.pure import promotion
from tests.unit.sidecar_data import status

pytestmark = pytest.mark.unit
POLL_INTERVAL = 2.0  # what the operator renders by default


def test_a_store_that_does_not_answer_yet_is_polled_at_the_promote_pace() -> None:
    assert promotion.polling("started", None)
    assert promotion.next_round("started", None, POLL_INTERVAL) == promotion.Wait(promotion.POLL_S)
    assert promotion.POLL_S < 0.25


def test_a_learner_asks_for_its_promotion_now() -> None:
    learner = status(3, learner=True)
    assert promotion.polling("started", learner)
    assert promotion.next_round("started", learner, POLL_INTERVAL) == promotion.AskToVote(learner)


def test_a_voter_is_watched_at_the_slower_pace_and_not_polled_by_the_promote_loop() -> None:
    voter = status(3)
    assert not promotion.polling("started", voter)
    assert promotion.next_round("started", voter, POLL_INTERVAL) == promotion.Wait(promotion.VOTER_CAP_S, voting=True)
    assert promotion.next_round("started", voter, 0.5) == promotion.Wait(0.5, voting=True)


@pytest.mark.parametrize("phase", ["joining", "leaving", "left"])
def test_nothing_is_promoted_before_the_store_started_or_while_leaving(phase: str) -> None:
    assert not promotion.polling(phase, None)
    assert promotion.next_round(phase, status(3, learner=True), POLL_INTERVAL) == promotion.Wait(POLL_INTERVAL)
    assert promotion.next_round(phase, status(3), POLL_INTERVAL) == promotion.Wait(POLL_INTERVAL), \
        "refusals are forgotten only by a started voter"


def test_refused_promotions_back_off_from_the_poll_to_a_second() -> None:
    backoff = promotion.refused_backoff()
    delays = [backoff.next() for _ in range(8)]
    assert delays[0] <= promotion.POLL_S * 1.2
    assert max(delays) <= promotion.REFUSED_CAP_S * 1.2
    assert delays[-1] >= promotion.REFUSED_CAP_S * 0.8
