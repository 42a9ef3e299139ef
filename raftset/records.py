"""Reading the JSON records that raftset keeps in annotations (on pods, Leases, the workload).

Anyone who can patch the object can write anything there, so every reader has the same rule:
an absent or unreadable record (not JSON, a key missing, a value of the wrong type) is no
record, never an exception in a decision.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def parse(raw: str | None, build: Callable[[Any], T]) -> T | None:
    """`build` over the decoded JSON of `raw`; None when `raw` is empty or `build` cannot read it."""
    if not raw:
        return None
    try:
        return build(json.loads(raw))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
