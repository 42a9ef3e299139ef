"""The one RFC 3339 writer and reader of status, conditions and annotation records."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from raftset.times import parse_rfc3339, rfc3339

pytestmark = pytest.mark.unit

T = datetime(2026, 11, 23, 7, 8, 9, tzinfo=timezone.utc)


def test_written_in_whole_seconds_utc_with_z() -> None:
    assert rfc3339(T.replace(microsecond=999_999)) == "2026-11-23T07:08:09Z"
    assert rfc3339(T.astimezone(timezone(timedelta(hours=2)))) == "2026-11-23T07:08:09Z"


@pytest.mark.parametrize("text", ["2026-11-23T07:08:09Z", "2026-11-23T09:08:09+02:00", "2026-11-23T07:08:09",
                                  "2026-11-23T07:08:09.000000Z"])
def test_read_back_as_an_aware_moment(text: str) -> None:
    assert parse_rfc3339(text) == T
    assert parse_rfc3339(text).tzinfo is not None  # type: ignore[union-attr]


def test_round_trip() -> None:
    assert parse_rfc3339(rfc3339(T)) == T


@pytest.mark.parametrize("raw", [None, "", "yesterday", "2026-13-01T00:00:00Z", 1700000000, ["2026-11-23T07:08:09Z"]])
def test_unreadable_is_none(raw: object) -> None:
    assert parse_rfc3339(raw) is None
