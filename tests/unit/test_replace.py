"""The operator narrates replacements from the pods' records: status rows, conditions, one Event per step."""

from __future__ import annotations


import pytest

from raftset.contract import ReplacePhase as P
from raftset.operator.pure import replace
from raftset.replace import Progress

pytestmark = pytest.mark.unit


def entry(pod: str, phase: str | None = None, *, requested: bool = True, reason: str = "why",
          old: str = "a1", new: str = "", steps: tuple[str, ...] = (), cause: str = "", id: str = "r1") -> dict:
    progress = Progress(phase, old, new, reason, steps or (phase,), cause, id).to_json() if phase else None
    return {"pod": pod, "requested": requested, "progress": progress}


def test_a_request_the_sidecar_has_not_taken_yet_is_shown_as_requested() -> None:
    [row] = replace.rows([entry("demo-1")])
    assert row["phase"] == P.REQUESTED and "sidecar" in row["message"]


def test_rows_carry_the_sidecars_record_sorted_by_pod() -> None:
    rows = replace.rows([entry("demo-2", P.LEARNER, new="b2"), entry("demo-0", P.REMOVING)])
    assert [r["pod"] for r in rows] == ["demo-0", "demo-2"]
    assert rows[1] == {"pod": "demo-2", "phase": "Learner", "message": "why", "oldMember": "a1", "newMember": "b2",
                       "steps": ["Learner"]}


def test_nothing_to_narrate_without_request_or_record() -> None:
    assert replace.rows([entry("demo-1", requested=False)]) == []
    assert replace.rows([{"pod": "demo-1", "requested": False, "progress": "{not json"}]) == []


def test_only_a_blocked_request_degrades() -> None:
    assert replace.blocked(replace.rows([entry("demo-1", P.QUEUED)])) is None
    reason, message = replace.blocked(replace.rows([entry("demo-1", P.WAITING, reason="would lose quorum")]))
    assert reason == "ReplaceWaiting" and "demo-1" in message and "quorum" in message


def test_a_member_that_needs_replacing_under_manual_policy_degrades_first() -> None:
    rows = replace.rows([entry("demo-1", P.WAITING, reason="quorum"),
                              entry("demo-2", P.NEEDED, requested=False, reason="data corrupt")])
    reason, message = replace.blocked(rows)
    assert reason == "ReplaceNeeded" and "demo-2" in message and "corrupt" in message




def test_a_finished_record_is_no_row() -> None:
    assert replace.rows([entry("demo-1", P.DONE, requested=False, steps=(P.REMOVING, P.DONE))]) == []
    assert replace.rows([entry("demo-1", P.WITHDRAWN, requested=False)]) == []
    # A new request while the last one's record is still on the pod: the sidecar has not taken it yet.
    [row] = replace.rows([entry("demo-1", P.DONE, requested=True, steps=(P.REMOVING, P.DONE))])
    assert row["phase"] == P.REQUESTED


# --- narration: every step once (untold, remember) ---------------------------------------------------

FOLLOWER = (P.REMOVING, P.REJOINING, P.LEARNER, P.DONE)
ASKED = "asked for (raftset.dev/replace=true)"


def tell(entries: list[dict], narrated: list[dict] | None = None) -> tuple[list, list[dict]]:
    """What one reconcile tells, and status.narrated after it (every Event applied)."""
    memory = list(narrated or [])
    tales = replace.untold(entries, memory)
    for tale in tales:
        memory = replace.remember(memory, tale)
    return [t.event for t in tales if t.event is not None], memory


def reasons(events: list) -> list[str]:
    return [e[1] for e in events]


def test_a_replacement_that_ran_between_two_reconciles_is_told_step_by_step_then_never_again() -> None:
    done = entry("demo-2", P.DONE, requested=False, old="a1", new="b2", steps=FOLLOWER, cause=ASKED)
    events, memory = tell([done])
    assert reasons(events) == ["ReplaceRemoving", "ReplaceRejoining", "ReplaceLearner", "Replaced"]
    replaced = events[-1][2]
    assert "member a1 was replaced by member b2" in replaced and replaced.endswith(f"(why: {ASKED})")
    assert "member a1 was removed" in events[0][2] and "new member b2 caught up" in events[2][2]
    assert memory == [{"pod": "demo-2", "replacement": "r1", "steps": 4}]
    assert tell([done], memory) == ([], memory)


def test_steps_seen_one_reconcile_at_a_time_are_each_told_once_the_current_one_with_its_details() -> None:
    memory: list[dict] = []
    told: list[str] = []
    for i, phase in enumerate(FOLLOWER, start=1):
        events, memory = tell([entry("demo-2", phase, new="b2" if i > 2 else "", reason=f"detail {i}",
                                     steps=FOLLOWER[:i])], memory)
        assert len(events) == 1, events
        told += reasons(events)
        if phase != P.DONE:
            assert events[0][2] == f"demo-2: detail {i}"
        events, memory = tell([entry("demo-2", phase, new="b2" if i > 2 else "", reason="later detail",
                                     steps=FOLLOWER[:i])], memory)
        assert events == []  # the same step with another message is not told again
    assert told == ["ReplaceRemoving", "ReplaceRejoining", "ReplaceLearner", "Replaced"]


def test_steps_missed_between_reconciles_are_told_in_order_after_those_told() -> None:
    _, memory = tell([entry("demo-1", P.HANDING_OFF, steps=(P.HANDING_OFF,))])
    events, memory = tell([entry("demo-1", P.REJOINING, reason="joining again",
                                 steps=(P.HANDING_OFF, P.REMOVING, P.REJOINING))], memory)
    assert reasons(events) == ["ReplaceRemoving", "ReplaceRejoining"]
    assert events[-1][2] == "demo-1: joining again"
    assert memory == [{"pod": "demo-1", "replacement": "r1", "steps": 3}]


def test_the_next_replacement_of_the_same_pod_is_told_from_its_first_step() -> None:
    _, memory = tell([entry("demo-1", P.DONE, steps=FOLLOWER, id="r1")])
    events, memory = tell([entry("demo-1", P.REMOVING, steps=(P.REMOVING,), id="r2", reason="removing")], memory)
    assert events == [("Normal", "ReplaceRemoving", "demo-1: removing")]
    assert memory == [{"pod": "demo-1", "replacement": "r2", "steps": 1}]


def test_a_waiting_step_under_way_is_left_to_the_degraded_condition_but_counted() -> None:
    events, memory = tell([entry("demo-1", P.WAITING, reason="would lose quorum")])
    assert events == [] and memory == [{"pod": "demo-1", "replacement": "r1", "steps": 1}]
    events, _ = tell([entry("demo-1", P.REMOVING, steps=(P.WAITING, P.REMOVING))], memory)
    assert reasons(events) == ["ReplaceRemoving"]  # the wait is not told twice


def test_a_wait_that_came_and_went_unseen_is_told() -> None:
    events, _ = tell([entry("demo-1", P.REMOVING, steps=(P.WAITING, P.REMOVING))])
    assert reasons(events) == ["ReplaceWaiting", "ReplaceRemoving"]
    assert all(kind == "Normal" for kind, _, _ in events)


def test_a_member_that_recovers_by_itself_is_told_not_needed() -> None:
    _, memory = tell([entry("demo-2", P.NEEDED, requested=False)])
    events, _ = tell([entry("demo-2", P.WITHDRAWN, requested=False, steps=(P.NEEDED, P.WITHDRAWN))], memory)
    assert reasons(events) == ["ReplaceNotNeeded"]


def test_a_request_withdrawn_before_the_member_left_is_told_withdrawn() -> None:
    events, _ = tell([entry("demo-1", P.WITHDRAWN, steps=(P.QUEUED, P.WITHDRAWN))])
    assert reasons(events) == ["ReplaceQueued", "ReplaceWithdrawn"]


def test_a_lost_volume_is_told_with_its_cause() -> None:
    cause = "lost volume: member a1 (demo-1) has our peer URL but our data dir is empty"
    events, _ = tell([entry("demo-1", P.DONE, requested=False, new="b2", cause=cause,
                            steps=(P.REMOVING, P.REJOINING, P.LEARNER, P.DONE))])
    assert events[-1][1] == "Replaced" and events[-1][2].endswith(f"(why: {cause})")


def test_a_finished_replacement_whose_new_member_was_not_recorded_still_reads_right() -> None:
    events, _ = tell([entry("demo-1", P.DONE, new="", steps=(P.REJOINING, P.DONE))])
    assert "member a1 was replaced by a new member, which votes" in events[-1][2]


def test_records_are_told_by_pod_and_each_pod_remembered_apart() -> None:
    events, memory = tell([entry("demo-2", P.REMOVING, id="x"), entry("demo-0", P.QUEUED, id="y")])
    assert [m[2].split(":")[0] for m in events] == ["demo-0", "demo-2"]
    assert memory == [{"pod": "demo-0", "replacement": "y", "steps": 1}, {"pod": "demo-2", "replacement": "x", "steps": 1}]
    # A pod whose record is not in this reading keeps its row: never taken as told-and-gone on absence.
    events, after = tell([entry("demo-0", P.QUEUED, id="y")], memory)
    assert events == [] and after == memory


def test_nothing_is_told_without_a_readable_record() -> None:
    assert tell([entry("demo-1"), {"pod": "demo-1", "requested": True, "progress": "{not json"}]) == ([], [])


def test_a_record_from_before_ids_is_known_by_its_old_member() -> None:
    legacy = entry("demo-1", P.REMOVING, id="")
    [tale] = replace.untold([legacy], [])
    assert tale.replacement == "a1"


def test_an_event_told_twice_has_one_name() -> None:
    [tale] = replace.untold([entry("demo-1", P.REMOVING, id="ab12cd34")], [])
    assert replace.event_name("demo", tale) == "demo.replace-demo-1-ab12cd34-0"
    assert replace.untold([entry("demo-1", P.REMOVING, id="ab12cd34")], []) == [tale]


def test_a_learner_step_told_late_without_its_new_member_reads_right() -> None:
    events, _ = tell([entry("demo-1", P.DONE, new="", steps=(P.LEARNER, P.DONE))])
    assert events[0][2] == "demo-1: the new member caught up as a learner"
