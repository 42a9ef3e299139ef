"""A supervised loop's health as plain data, and the liveness verdict over every loop (runner: raftset.sidecar.supervision)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Outcome = Literal["ok", "expected", "unexpected"]


@dataclass(frozen=True)
class LoopHealth:
    """What supervision knows about one loop; plain data, so liveness is a pure function."""

    name: str
    bound: float  # seconds without progress after which the loop counts as stuck
    last_progress: float  # monotonic time of the last progress (the start counts as one)
    rounds: int = 0
    expected_errors: int = 0
    unexpected_errors: int = 0
    failing_since: float | None = None  # first unexpected error of the current streak
    last_error: str = ""
    ended: str | None = None  # why the loop's task ended while the sidecar was not stopping


@dataclass(frozen=True)
class Liveness:
    alive: bool
    problems: tuple[str, ...]


def started(name: str, bound: float, now: float) -> LoopHealth:
    return LoopHealth(name=name, bound=bound, last_progress=now)


def after_round(health: LoopHealth, outcome: Outcome, now: float, error: str = "") -> LoopHealth:
    """The loop's health after one round."""
    rounds = health.rounds + 1
    if outcome == "unexpected":
        return dataclasses.replace(
            health, rounds=rounds, unexpected_errors=health.unexpected_errors + 1, last_error=error,
            failing_since=health.failing_since if health.failing_since is not None else now)
    expected = health.expected_errors + (outcome == "expected")
    return dataclasses.replace(health, rounds=rounds, expected_errors=expected, last_progress=now,
                               failing_since=None, last_error=error if outcome == "expected" else "")


def progressed(health: LoopHealth, now: float) -> LoopHealth:
    """A round still running moved its work forward (a backup's snapshot chunk or uploaded part)."""
    return dataclasses.replace(health, last_progress=now)


def ended(health: LoopHealth, reason: str) -> LoopHealth:
    return dataclasses.replace(health, ended=reason)


def liveness(loops: Sequence[LoopHealth], now: float) -> Liveness:
    """Alive unless some loop's task ended or it made no progress within its bound."""
    problems: list[str] = []
    for h in loops:
        if h.ended is not None:
            problems.append(f"{h.name}: loop ended: {h.ended}")
        elif now - h.last_progress > h.bound:
            why = f"failing since {now - h.failing_since:.0f}s: {h.last_error}" if h.failing_since is not None \
                else "a round has not finished"
            problems.append(f"{h.name}: no progress for {now - h.last_progress:.0f}s (bound {h.bound:g}s), {why}")
    return Liveness(alive=not problems, problems=tuple(problems))


def bound_for(interval: float, stall: float) -> float:
    """A loop may go `stall` seconds beyond one of its own intervals without progress."""
    return interval + stall
