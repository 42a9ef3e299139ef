"""The survivor choice and the recovery record (raftset.quorum_loss), exhaustively over small values."""

from __future__ import annotations

import itertools

import pytest

from raftset.quorum_loss import QuorumLossRecord, Survivor, choose, parse_record

pytestmark = pytest.mark.unit

VALUES = (0, 1, 2)


def survivor(ordinal: int, committed: int, term: int, applied: int, member_id: str | None = None) -> Survivor:
    return Survivor(pod=f"demo-{ordinal}", ordinal=ordinal, member_id=f"{ordinal + 10:x}" if member_id is None else member_id,
                    committed=committed, term=term, applied=applied)


def every_group(size: int, values: tuple[int, ...] = VALUES) -> itertools.product:
    """Every assignment of (committed, term, applied) from `values` to `size` survivors."""
    return itertools.product(itertools.product(values, values, values), repeat=size)


@pytest.mark.parametrize("size", [1, 2, 3])
def test_the_choice_is_the_highest_committed_then_term_then_applied_then_the_lowest_ordinal(size: int) -> None:
    for group in every_group(size):
        survivors = [survivor(o, *values) for o, values in enumerate(group)]
        chosen = choose(survivors)
        assert chosen is not None
        top_committed = max(s.committed for s in survivors)
        assert chosen.committed == top_committed, "never a survivor that knows fewer committed entries"
        same_commit = [s for s in survivors if s.committed == top_committed]
        assert chosen.term == max(s.term for s in same_commit)
        same_term = [s for s in same_commit if s.term == chosen.term]
        assert chosen.applied == max(s.applied for s in same_term)
        tied = [s for s in same_term if s.applied == chosen.applied]
        assert chosen.ordinal == min(s.ordinal for s in tied)


@pytest.mark.parametrize("size", [2, 3])
def test_the_choice_does_not_depend_on_the_order_the_survivors_were_listed_in(size: int) -> None:
    for group in every_group(size, (0, 1)):
        survivors = [survivor(o, *values) for o, values in enumerate(group)]
        chosen = {choose(order) for order in itertools.permutations(survivors)}
        assert len(chosen) == 1


def test_the_committed_prefix_of_the_choice_holds_every_survivors_committed_entries() -> None:
    # Log Matching: committed prefixes are prefixes of one sequence; model it and check coverage.
    history = [1, 1, 2, 2, 3, 3, 3, 4]  # the term of each committed entry, index 1..8
    for commits in itertools.product(range(len(history) + 1), repeat=3):
        survivors = [survivor(o, c, history[c - 1] if c else 0, c) for o, c in enumerate(commits)]
        chosen = choose(survivors)
        assert chosen is not None
        for other in survivors:
            assert history[:other.committed] == history[:chosen.committed][:other.committed]


def test_a_higher_ordinal_is_chosen_when_it_knows_more() -> None:
    assert choose([survivor(0, 10, 3, 10), survivor(1, 12, 3, 11)]) == survivor(1, 12, 3, 11)


def test_nobody_to_choose() -> None:
    assert choose([]) is None
    assert choose([survivor(0, 5, 1, 5, member_id="")]) is None  # a member whose id is unknown cannot be checked
    assert choose([survivor(0, 5, 1, 5, member_id=""), survivor(1, 1, 1, 1)]) == survivor(1, 1, 1, 1)


def test_the_record_round_trips_and_bad_records_are_none() -> None:
    record = QuorumLossRecord(id="r1", survivor="demo-1", member_id="ab", started="2026-01-01T00:00:00Z",
                            requested="auto")
    assert parse_record(record.to_json()) == record
    for raw in (None, "", "not json", "[]", '{"id": "r1"}', '{"id": "", "survivor": "demo-1", "member_id": "ab"}',
                '{"id": "r1", "survivor": "demo-1", "member_id": ""}'):
        assert parse_record(raw) is None


def test_the_record_carries_the_survivors_term_and_an_older_record_reads_as_term_0() -> None:
    """The survivor's sidecar refuses to force while a peer has a leader at this term or later (issue 30)."""
    record = QuorumLossRecord(id="r1", survivor="demo-1", member_id="ab", started="", requested="auto", term=7)
    assert parse_record(record.to_json()) == record
    older = '{"id": "r1", "survivor": "demo-1", "member_id": "ab", "started": "", "requested": "auto"}'
    parsed = parse_record(older)
    assert parsed is not None and parsed.term == 0
    for bad in ('"7"', "-1", "true", "1.5", "null"):
        raw = older[:-1] + f', "term": {bad}}}'
        parsed = parse_record(raw)
        assert parsed is not None and parsed.term == 0, bad
