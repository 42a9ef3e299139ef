"""The checker's comparison of acknowledged writes with what reads back."""

from __future__ import annotations

import pytest

from tests.harness.checker import Ack, lost_writes

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
