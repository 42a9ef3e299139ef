"""The checker's comparison of acknowledged writes with what reads back."""

from __future__ import annotations

import pytest

from tests.harness.checker import Ack, ExcusedLoss, lost_writes
from tests.harness.history import Op

pytestmark = pytest.mark.unit

ACKED = {"/writer/1": Ack("1", 5), "/writer/2": Ack("2", 6)}


def test_writes_that_read_back_exactly_are_not_lost() -> None:
    assert lost_writes(ACKED, {"/writer/1": ("1", 5), "/writer/2": ("2", 6), "/writer/3": ("3", 7)}) == []


@pytest.mark.parametrize("read", [
    {"/writer/1": ("1", 5)},  # missing
    {"/writer/1": ("1", 5), "/writer/2": ("x", 6)},  # another value
    {"/writer/1": ("1", 5), "/writer/2": ("2", 9)},  # written again later
])
def test_a_missing_or_changed_write_is_lost(read: dict[str, tuple[str, int]]) -> None:
    assert [p.split(":")[0] for p in lost_writes(ACKED, read)] == ["/writer/2"]


# The excused-loss model of a quorum loss (checker.ExcusedLoss): kv-0 survived holding revision 10.
SURVIVOR, LOST = "http://kv-0:2379", "http://kv-1:2379"
LOSS = ExcusedLoss(survivor_revision=10, lost_endpoints=frozenset({LOST}))


def test_only_writes_a_lost_member_acknowledged_above_the_survivors_revision_are_excused() -> None:
    acked = {"above-by-lost": Ack("1", 11, LOST), "at-by-lost": Ack("2", 10, LOST),
             "above-by-survivor": Ack("3", 12, SURVIVOR), "below-by-survivor": Ack("4", 9, SURVIVOR)}
    assert set(LOSS.acks(acked)) == {"above-by-lost"}


def op(kind: str, endpoint: str, revision: int, **answer: object) -> Op:
    return Op(client=0, op=kind, key="/traffic/0", call=1, returned=2, value="v" if kind != "get" else "",
              endpoint=endpoint, revision=revision, **answer)  # type: ignore[arg-type]


def test_an_excused_write_becomes_an_unknown_outcome_and_nothing_else_changes() -> None:
    excused = [op("put", LOST, 11), op("delete", LOST, 12, deleted=1), op("cas", LOST, 13, succeeded=True)]
    kept = [op("put", LOST, 10), op("put", SURVIVOR, 14), op("get", LOST, 15, found=True, got="v"),
            op("cas", LOST, 16, succeeded=False), op("delete", LOST, 17, deleted=0)]
    out = LOSS.history([*excused, *kept])
    assert [o.unknown for o in out] == [True] * 3 + [False] * 5
    assert all(o.call == 1 and o.value == "v" and o.revision == 0 for o in out[:3]), "the call stays, the answer goes"
    assert out[3:] == kept, "reads, failed compares and writes the loss cannot erase stay as answered"
