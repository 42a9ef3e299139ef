"""How far ahead a sidecar's heartbeat is stamped: the one reading both fault catalogs take of a skewed clock."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tools.devcluster.podfaults import stamped_ahead

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 8, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(("stamp", "ahead"), [
    ("2026-11-29T08:02:30Z", 150.0),
    ("2026-11-29T08:00:00+00:00", 0.0),
    ("2026-11-29T07:59:59.500000Z", -0.5),
])
def test_the_heartbeats_own_time_against_this_clock(stamp: str, ahead: float) -> None:
    assert stamped_ahead({"time": stamp, "role": "leader"}, NOW) == ahead
