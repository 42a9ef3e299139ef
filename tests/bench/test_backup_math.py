"""The backup benchmark's pure parts: throughput and which acknowledged writes a snapshot holds."""

from __future__ import annotations

import pytest

from tests.bench.backup import MIB, acked_in_snapshot, throughput_mib_s
from tests.harness.checker import Ack

pytestmark = pytest.mark.unit


def test_throughput_is_mib_per_second_and_zero_for_no_time() -> None:
    assert throughput_mib_s(256 * MIB, 8.0) == 32.0
    assert throughput_mib_s(3 * MIB, 2.0) == 1.5
    assert throughput_mib_s(MIB, 0.0) == 0.0


def test_a_snapshot_holds_the_writes_at_or_below_its_revision() -> None:
    acked = {"a": Ack("1", 10), "b": Ack("2", 11), "c": Ack("3", 12)}
    assert acked_in_snapshot(acked, 11) == {"a": Ack("1", 10), "b": Ack("2", 11)}
    assert acked_in_snapshot(acked, 9) == {}
