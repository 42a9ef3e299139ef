"""The one rule for JSON records in annotations: absent or unreadable is no record, never an exception."""

from __future__ import annotations

from typing import Any

import pytest

from raftset import records

pytestmark = pytest.mark.unit


def _pair(doc: Any) -> tuple[str, int]:
    return str(doc["name"]), int(doc.get("count", 0))


def test_a_readable_record_is_built() -> None:
    assert records.parse('{"name": "a", "count": "3"}', _pair) == ("a", 3)


@pytest.mark.parametrize("raw", [None, "", "not json", "[1, 2]", '"text"', "null", "7", '{"count": 1}',
                                 '{"name": "a", "count": "x"}', '{"name": "a", "count": [1]}'])
def test_absent_or_unreadable_is_none(raw: str | None) -> None:
    assert records.parse(raw, _pair) is None


def test_an_attribute_error_in_build_is_unreadable_too() -> None:
    assert records.parse('["a"]', lambda doc: doc.get("name")) is None
