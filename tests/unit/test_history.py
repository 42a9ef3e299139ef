"""The recorded history's JSON form, its doctoring helpers, and the watch checks (all pure)."""

from __future__ import annotations

import json

import pytest

from tests.harness.history import Op, from_json, lost_write, stale_read, stale_serializable_read, to_json
from tests.harness.watchcheck import Event, dropped, duplicated, reordered, settled, watch_problems

pytestmark = pytest.mark.unit

K = "/traffic/0"


def put(client: int, value: str, call: int, returned: int | None, revision: int, key: str = K) -> Op:
    return Op(client=client, op="put", key=key, call=call, returned=returned, value=value, revision=revision)


def get(client: int, call: int, returned: int, got: str | None, revision: int, mod: int = 0,
        serializable: bool = False) -> Op:
    return Op(client=client, op="get", key=K, call=call, returned=returned, found=got is not None, got=got or "",
              revision=revision, mod_revision=mod, serializable=serializable)


# a: written at 2, b overwrites it at 3, then read twice
CLEAN = [
    put(0, "a", 10, 20, 2),
    put(0, "b", 30, 40, 3),
    get(1, 50, 60, "b", 3, 3),
    get(2, 70, 80, "b", 3, 3),
]


def test_json_round_trips_and_an_unknown_outcome_has_a_null_return() -> None:
    ops = [*CLEAN, put(3, "c", 90, None, 0),
           Op(client=4, op="cas", key=K, call=95, returned=99, value="d", expect=None, succeeded=False, revision=4)]
    text = to_json(ops)
    assert from_json(text) == ops
    encoded = json.loads(text)["operations"]
    assert encoded[4]["return"] is None and "returned" not in encoded[4]
    assert encoded[5]["expect"] is None and encoded[5]["op"] == "cas"


def test_acknowledged_writes_exclude_failed_compares_empty_deletes_and_unknowns() -> None:
    assert put(0, "a", 1, 2, 2).acknowledged_write
    assert not put(0, "a", 1, None, 0).acknowledged_write
    assert not Op(client=0, op="cas", key=K, call=1, returned=2, value="x", succeeded=False).acknowledged_write
    assert not Op(client=0, op="delete", key=K, call=1, returned=2, deleted=0).acknowledged_write
    assert Op(client=0, op="delete", key=K, call=1, returned=2, deleted=1).acknowledged_write


def test_a_stale_read_returns_the_value_overwritten_before_the_read_was_called() -> None:
    doctored = stale_read(CLEAN)
    assert doctored[2] == get(1, 50, 60, "a", 3, 3)
    assert doctored[:2] + doctored[3:] == CLEAN[:2] + CLEAN[3:]


def test_no_stale_read_can_be_made_from_a_single_write() -> None:
    with pytest.raises(ValueError):
        stale_read([CLEAN[0], get(1, 50, 60, "a", 2, 2)])


def test_a_lost_write_is_read_as_its_predecessor_everywhere() -> None:
    doctored = lost_write(CLEAN)
    assert [op.got for op in doctored if op.op == "get"] == ["a", "a"]
    assert doctored[:2] == CLEAN[:2]


def test_a_write_read_only_concurrently_is_not_chosen_to_be_lost() -> None:
    concurrent = [CLEAN[0], CLEAN[1], get(1, 35, 45, "b", 3, 3)]  # called before b was acknowledged
    with pytest.raises(ValueError):
        lost_write(concurrent)


def test_a_stale_serializable_read_returns_an_older_value_at_its_own_revision() -> None:
    ops = [CLEAN[0], CLEAN[1], get(1, 50, 60, "b", 3, 3, serializable=True)]
    doctored = stale_serializable_read(ops)
    assert doctored[2] == get(1, 50, 60, "a", 3, 2, serializable=True)
    with pytest.raises(ValueError):
        stale_serializable_read(CLEAN)  # no serializable read


WRITES = [
    put(0, "a", 10, 20, 5),
    put(1, "x", 12, 22, 6, key="/traffic/1"),
    Op(client=2, op="delete", key=K, call=30, returned=40, deleted=1, revision=7),
    put(3, "b", 50, 60, 8),
    put(4, "maybe", 70, None, 0),  # unknown outcome
]
EVENTS = [
    Event(5, K, "put", "a"),
    Event(6, "/traffic/1", "put", "x"),
    Event(7, K, "delete"),
    Event(8, K, "put", "b"),
]


def test_a_complete_ordered_watch_has_no_problems_and_may_carry_an_unknown_write() -> None:
    assert watch_problems(EVENTS, WRITES, start=5, horizon=8) == []
    assert watch_problems([*EVENTS, Event(9, K, "put", "maybe")], WRITES, start=5, horizon=8) == []


def test_a_reordered_watch_is_out_of_order() -> None:
    problems = watch_problems(reordered(EVENTS), WRITES, start=5, horizon=8)
    assert problems == ["event 1 at revision 5 (/traffic/0) after revision 6: out of order"]


def test_a_dropped_event_is_a_gap_and_a_repeated_one_a_duplicate() -> None:
    assert watch_problems(dropped(EVENTS, 2), WRITES, start=5, horizon=8) == [
        "gap: the acknowledged delete of /traffic/0 at revision 7 was never delivered"]
    assert watch_problems(duplicated(EVENTS, 1), WRITES, start=5, horizon=8) == [
        "event 2 at revision 6 (/traffic/1): duplicate"]


def test_a_watcher_that_stopped_short_of_the_horizon_has_gaps() -> None:
    problems = watch_problems(EVENTS[:2], WRITES, start=5, horizon=8)
    assert len(problems) == 2 and all(p.startswith("gap:") for p in problems)


def test_writes_before_the_start_are_not_expected_but_events_before_it_are_wrong() -> None:
    assert watch_problems(EVENTS[2:], WRITES, start=7, horizon=8) == []
    assert watch_problems(EVENTS, WRITES, start=6, horizon=8) == [
        "event 0 at revision 5 precedes the watch's start 6"]


def test_a_wrong_or_invented_value_is_reported() -> None:
    wrong = [EVENTS[0], EVENTS[1], EVENTS[2], Event(8, K, "put", "c")]
    assert watch_problems(wrong, WRITES, start=5, horizon=8) == [
        "event 3 at revision 8: put of /traffic/0='c', but the acknowledged write there was put of /traffic/0='b'"]
    invented = [*EVENTS, Event(9, K, "put", "nobody")]
    assert watch_problems(invented, WRITES, start=5, horizon=8) == [
        "event 4 at revision 9: put of /traffic/0='nobody', which no client wrote"]


def test_a_watch_settles_unknown_writes_it_never_delivered_and_keeps_the_rest() -> None:
    """A write of unknown outcome whose value the complete watch delivered took effect and stays
    unknown; one it never delivered did not, and leaves the history. Answered operations, reads
    and deletes (no value to look for) are never touched."""
    cas_lost = Op(client=5, op="cas", key=K, call=75, returned=None, value="never", expect="b")
    cas_done = Op(client=6, op="cas", key=K, call=76, returned=None, value="swapped", expect="b")
    get_unknown = Op(client=7, op="get", key=K, call=77, returned=None)
    delete_unknown = Op(client=8, op="delete", key=K, call=78, returned=None)
    ops = [*WRITES, cas_lost, cas_done, get_unknown, delete_unknown]
    delivered = [*EVENTS, Event(9, K, "put", "swapped")]
    kept = settled(ops, delivered)
    assert kept == [*WRITES[:4], cas_done, get_unknown, delete_unknown], "'maybe' and 'never' never took effect"
    assert settled(ops, [*delivered, Event(10, K, "put", "maybe")]) == [*WRITES, cas_done, get_unknown,
                                                                          delete_unknown]
    assert settled(WRITES[:4], []) == WRITES[:4], "an answered write stays even when the watch missed it"


def test_an_unknown_outcome_keeps_what_the_client_was_told() -> None:
    told = Op(client=1, op="put", key=K, call=1, returned=None, value="v", error="UNAVAILABLE: Connection refused")
    assert from_json(to_json([told])) == [told]
