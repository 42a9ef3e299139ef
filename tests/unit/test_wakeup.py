"""Issue 28, item 1: when a cluster's next round is due without an event, and which Lease events wake one."""

from __future__ import annotations

from datetime import timedelta

import pytest

from raftset import contract
from raftset.operator.pure import wakeup
from raftset.operator.pure.freshness import Sighting
from raftset.operator.pure.lasting import Seen
from raftset.operator.pure.scale_step import SCALE_IN, ScaleStep
from raftset.operator.pure.wakeup import Heard, Wake, lease_view, lease_wakes, next_wake
from raftset.times import rfc3339
from tests.unit.builders import NOW, heartbeat, lease

pytestmark = pytest.mark.unit

S = timedelta(seconds=1)
AVAILABLE = {"conditions": [{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "False"},
                            {"type": "Degraded", "status": "False"}]}


def test_a_cluster_at_rest_sleeps_until_its_resync() -> None:
    """Its heartbeats going stale ring it on their own (raftset.operator.staleness)."""
    wake = next_wake(NOW, recheck_seconds=5, resting=True, resync_at=NOW + 600 * S)
    assert wake == Wake(NOW + 600 * S)


def test_a_cluster_in_motion_is_looked_at_again_after_the_recheck_period() -> None:
    wake = next_wake(NOW, recheck_seconds=5, resting=False, resync_at=NOW + 600 * S)
    assert wake.at == NOW + 5 * S


def test_the_earliest_decision_moment_wins() -> None:
    wake = next_wake(NOW, recheck_seconds=5, resting=True, resync_at=NOW + 600 * S,
                     due=[None, NOW + 42 * S, NOW + 90 * S])
    assert wake.at == NOW + 42 * S


def test_a_moment_already_past_is_retried_at_the_old_pace_never_at_once() -> None:
    wake = next_wake(NOW, recheck_seconds=5, resting=True, resync_at=NOW - 3 * S, due=[NOW])
    assert wake.at == NOW + 5 * S


def test_a_step_becomes_stuck_stuck_after_seconds_after_it_started() -> None:
    step = ScaleStep(SCALE_IN, "demo-2", "3", 17, rfc3339(NOW))
    assert wakeup.stuck_at(step, 120.0) == NOW + 120 * S
    assert wakeup.stuck_at(None, 120.0) is None
    assert wakeup.stuck_at(ScaleStep(SCALE_IN, "demo-2", "3", 17, "garbled"), 120.0) is None


def test_a_disagreement_is_due_grace_after_it_was_first_seen_until_told() -> None:
    seen = {"a": Seen(NOW - 10 * S), "b": Seen(NOW - 100 * S, announced=True)}
    assert wakeup.lasting_at(seen, 120 * S) == NOW + 110 * S
    assert wakeup.lasting_at({"b": seen["b"]}, 120 * S) is None


def test_a_heartbeat_time_newer_than_the_status_shows_is_due_refresh_seconds_after_the_shown_one() -> None:
    shown = {"members": [{"lastHeartbeat": rfc3339(NOW - 20 * S)}, {"lastHeartbeat": rfc3339(NOW - 50 * S)}]}
    computed = {"members": [{"lastHeartbeat": rfc3339(NOW)}, {"lastHeartbeat": rfc3339(NOW - 50 * S)}]}
    assert wakeup.refresh_at(shown, computed, 60) == NOW + 40 * S
    assert wakeup.refresh_at(shown, shown, 60) is None  # a dead member's time does not call for rounds


def test_at_rest_is_steady_available_and_neither_progressing_nor_degraded() -> None:
    assert wakeup.at_rest("steady", AVAILABLE)
    assert not wakeup.at_rest("wait", AVAILABLE)
    degraded = {"conditions": [*AVAILABLE["conditions"][:2], {"type": "Degraded", "status": "True"}]}
    assert not wakeup.at_rest("steady", degraded)
    assert not wakeup.at_rest("steady", {})


@pytest.mark.parametrize(("reason", "resting"), [
    ("QuorumHealthy", True), ("Recovered", True),
    ("Rejoining", False), ("Recovering", False), ("QuorumLost", False), ("SurvivorsNotAnswering", False),
    ("MembersUnseen", False),
])
def test_a_quorum_loss_or_a_recovery_under_way_is_motion_even_when_available(reason: str, resting: bool) -> None:
    """After a recovery the cluster is Available again while members rejoin (Rejoining): its end is
    looked for at the recheck pace, as the timer did, not only when an event comes."""
    quorum = {"type": "QuorumLost", "status": "False" if resting or reason == "Rejoining" else "True",
              "reason": reason}
    assert wakeup.at_rest("steady", {"conditions": [*AVAILABLE["conditions"], quorum]}) is resting


def _heard(beat: dict | None = None, *, token: str = "1", at: timedelta = timedelta(0), confirmed: bool = True,
           holder: str = "__pod__") -> Heard:
    return Heard(lease_view(lease(beat=beat, holder=holder)), Sighting(token, NOW + at, confirmed))


def test_a_plain_renewal_wakes_nothing() -> None:
    renewed = {**heartbeat(), "time": (NOW + 10 * S).isoformat(), "raft_index": 99}
    assert not lease_wakes(_heard(), _heard(renewed, token="2", at=10 * S), NOW + 10 * S)


def test_a_changed_record_a_new_lease_or_a_first_renewal_wakes_a_round() -> None:
    later = NOW + 10 * S
    assert lease_wakes(None, _heard(), NOW)
    assert lease_wakes(_heard(), _heard(heartbeat(contract.ROLE_LEADER), token="2", at=10 * S), later)
    assert lease_wakes(_heard(), _heard(heartbeat(healthy=False), token="2", at=10 * S), later)
    assert lease_wakes(_heard(), _heard(token="2", at=10 * S, holder="demo-9"), later)
    assert lease_wakes(_heard(confirmed=False), _heard(token="2", at=10 * S), later)


def test_a_renewal_of_a_record_gone_stale_wakes_a_round() -> None:
    later = NOW + 31 * S  # lease 30 s: the last sighting had expired
    assert lease_wakes(_heard(), _heard(token="2", at=31 * S), later)
    assert not lease_wakes(_heard(), _heard(), later)  # the same sighting again (a relist) is no renewal


def test_an_unreadable_record_is_compared_raw() -> None:
    assert lease_view(lease(beat="{not json")).record == "{not json"
