"""Pure statistics over what a benchmark observed: no processes, no clocks."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """One client request: when it started and ended (seconds), and whether it succeeded."""

    start: float
    end: float
    ok: bool


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(pct / 100 * len(ordered))))
    return ordered[rank - 1]


def longest_stall(samples: Iterable[Sample], window: tuple[float, float]) -> float:
    """The longest time inside `window` during which no request completed successfully."""
    start, end = window
    done = sorted(s.end for s in samples if s.ok and start <= s.end <= end)
    edges = [start, *done, end]
    return max(b - a for a, b in zip(edges, edges[1:]))


def started_in(samples: Iterable[Sample], window: tuple[float, float]) -> int:
    """How many of `samples` started inside `window` (e.g. the requests that failed in it)."""
    return sum(1 for s in samples if window[0] <= s.start <= window[1])


def leader_changes(observed: Sequence[str]) -> int:
    """How often the observed leader differs from the one observed before it."""
    seen = [leader for leader in observed if leader]
    return sum(1 for a, b in zip(seen, seen[1:]) if a != b)


@dataclass(frozen=True)
class WindowStats:
    writes: int
    failed_writes: int
    longest_stall_s: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    per_s: float  # successful requests per second of the window: the sustained rate


def window_stats(samples: Sequence[Sample], window: tuple[float, float]) -> WindowStats:
    inside = [s for s in samples if window[0] <= s.start <= window[1]]
    latencies = [(s.end - s.start) * 1000 for s in inside if s.ok]
    length = window[1] - window[0]
    return WindowStats(
        writes=len(inside),
        failed_writes=sum(1 for s in inside if not s.ok),
        longest_stall_s=longest_stall(samples, window),
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
        p999_ms=percentile(latencies, 99.9),
        per_s=len(latencies) / length if length > 0 else 0.0,
    )


def leaders_in_window(observed: Sequence[tuple[float, str]], window: tuple[float, float]) -> list[str]:
    """The leaders observed inside `window`, led by the last one known when it opened.

    Without that first entry a change right at the start of the window would go uncounted.
    """
    start, end = window
    before = [leader for t, leader in observed if t < start and leader]
    inside = [leader for t, leader in observed if start <= t <= end]
    return before[-1:] + inside
