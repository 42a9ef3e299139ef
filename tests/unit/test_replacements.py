"""The operator narrates replacements from the pods' records: status rows, conditions, one Event per step."""

from __future__ import annotations


import pytest

from raftset.contract import ReplacePhase as P
from raftset.operator import replacements
from raftset.replacement import Progress

pytestmark = pytest.mark.unit


def entry(pod: str, phase: str | None = None, *, requested: bool = True, reason: str = "why",
          old: str = "a1", new: str = "", steps: tuple[str, ...] = ()) -> dict:
    progress = Progress(phase, old, new, reason, steps).to_json() if phase else None
    return {"pod": pod, "requested": requested, "progress": progress}


def test_a_request_the_sidecar_has_not_taken_yet_is_shown_as_requested() -> None:
    [row] = replacements.rows([entry("demo-1")])
    assert row["phase"] == P.REQUESTED and "sidecar" in row["message"]


def test_rows_carry_the_sidecars_record_sorted_by_pod() -> None:
    rows = replacements.rows([entry("demo-2", P.LEARNER, new="b2"), entry("demo-0", P.REMOVING)])
    assert [r["pod"] for r in rows] == ["demo-0", "demo-2"]
    assert rows[1] == {"pod": "demo-2", "phase": "Learner", "message": "why", "oldMember": "a1", "newMember": "b2",
                       "steps": []}


def test_nothing_to_narrate_without_request_or_record() -> None:
    assert replacements.rows([entry("demo-1", requested=False)]) == []
    assert replacements.rows([{"pod": "demo-1", "requested": False, "progress": "{not json"}]) == []


def test_only_a_blocked_request_degrades() -> None:
    assert replacements.blocked(replacements.rows([entry("demo-1", P.QUEUED)])) is None
    reason, message = replacements.blocked(replacements.rows([entry("demo-1", P.WAITING, reason="would lose quorum")]))
    assert reason == "ReplaceWaiting" and "demo-1" in message and "quorum" in message


def test_each_step_is_announced_once() -> None:
    first = replacements.rows([entry("demo-1", P.HANDING_OFF)])
    second = replacements.rows([entry("demo-1", P.REMOVING)])
    assert [e[1] for e in replacements.announcements([], first)] == ["ReplaceHandingOff"]
    assert replacements.announcements(first, first) == []
    assert [e[1] for e in replacements.announcements(first, second)] == ["ReplaceRemoving"]


def test_a_record_gone_after_the_member_left_is_a_finished_replacement() -> None:
    learner = replacements.rows([entry("demo-1", P.LEARNER, new="b2")])
    [(kind, reason, message)] = replacements.announcements(learner, [])
    assert (kind, reason) == ("Normal", "Replaced") and "a1" in message and "b2" in message


def test_a_record_gone_before_the_member_left_is_a_withdrawn_request() -> None:
    queued = replacements.rows([entry("demo-1", P.QUEUED)])
    assert [e[1] for e in replacements.announcements(queued, [])] == ["ReplaceWithdrawn"]


def test_waiting_is_announced_by_the_degraded_condition_not_twice() -> None:
    waiting = replacements.rows([entry("demo-1", P.WAITING, reason="would lose quorum")])
    assert replacements.announcements([], waiting) == []


def test_a_member_that_needs_replacing_under_manual_policy_degrades_first() -> None:
    rows = replacements.rows([entry("demo-1", P.WAITING, reason="quorum"),
                              entry("demo-2", P.NEEDED, requested=False, reason="data corrupt")])
    reason, message = replacements.blocked(rows)
    assert reason == "ReplaceNeeded" and "demo-2" in message and "corrupt" in message


def test_a_member_that_recovers_by_itself_is_announced() -> None:
    needed = replacements.rows([entry("demo-2", P.NEEDED, requested=False)])
    assert [e[1] for e in replacements.announcements(needed, [])] == ["ReplaceNotNeeded"]


def test_steps_taken_between_two_reconciles_are_each_announced_in_order() -> None:
    first = replacements.rows([entry("demo-1", P.HANDING_OFF, steps=(P.HANDING_OFF,))])
    later = replacements.rows([entry("demo-1", P.REJOINING, reason="joining again",
                                     steps=(P.HANDING_OFF, P.REMOVING, P.REJOINING))])
    events = replacements.announcements(first, later)
    assert [e[1] for e in events] == ["ReplaceRemoving", "ReplaceRejoining"]
    assert events[-1][2] == "demo-1: joining again"
    assert [e[1] for e in replacements.announcements([], later)] == [
        "ReplaceHandingOff", "ReplaceRemoving", "ReplaceRejoining"]


def test_a_finished_replacement_says_why_it_began() -> None:
    cause = "the store crash-loops: 3 restarts without serving (threshold 3)"
    record = Progress(P.LEARNER, "a1", "b2", "catching up", (P.REMOVING, P.LEARNER), cause).to_json()
    [row] = replacements.rows([{"pod": "demo-1", "requested": False, "progress": record}])
    assert row["cause"] == cause
    [(_, reason, message)] = replacements.announcements([row], [])
    assert reason == "Replaced" and message.endswith(f"(why: {cause})")


def test_a_finished_replacement_whose_new_member_was_not_recorded_still_reads_right() -> None:
    rejoining = replacements.rows([entry("demo-1", P.REJOINING)])
    [(_, reason, message)] = replacements.announcements(rejoining, [])
    assert reason == "Replaced" and "member a1 was replaced by a new member, which votes" in message
