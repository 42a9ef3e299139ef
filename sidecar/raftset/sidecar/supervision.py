"""Supervised background loops: errors are retried, a dead or stuck loop fails /livez.

Each loop (heartbeat, promote, clean, membership, backup, maintenance, repair) runs rounds. Every round ends in one
of three outcomes, recorded in the loop's `LoopHealth` by the pure `after_round`:

* `ok` — the round finished;
* `expected` — a peer or the API did not answer or refused (`RETRYABLE`): logged once per
  distinct message, retried at the loop's own pace. Restarting the sidecar would not help,
  so this still counts as progress;
* `unexpected` — anything else (a bug, a library raising what it should not): logged with
  its traceback, counted, retried after a capped exponential backoff, and *not* progress.

A round whose work may rightly outlast the bound (a backup: a large snapshot over a slow
link) reports `progressed` as it moves bytes, through `Loops.reporter`: each report counts as
progress, so such a round fails /livez only when it stops moving for the bound.

`liveness` (pure) says the sidecar is dead when a loop's task ended while the sidecar was
not stopping, or when a loop made no progress within its bound (a round that hangs, or
rounds that keep failing unexpectedly): kubelet's livenessProbe on /livez then restarts
the sidecar container, which starts every loop afresh. /readyz is not affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from raftset.sidecar.plumbing import RETRYABLE, Backoff

log = logging.getLogger("raftset.sidecar")

Outcome = Literal["ok", "expected", "unexpected"]
# Test-only: a directory where the file `<loop>.hang` makes that loop's next round hang until
# the file is removed (the hook writes `<loop>.hanging` while it holds, so a test can wait for
# the hold instead of guessing when the next round starts) and `<loop>.raise` makes its rounds
# raise, so the etcd tier can prove that /livez notices and the e2e tier can hold a state that
# a loop would otherwise end. A step may name a point of its own (`Loops.test_hold`: clean's
# `clean-locked`, inside the membership lock). Never set in a rendered pod (tests/unit/test_sidecar_supervision.py
# checks); unset, the hook is one empty-string check per round.
TEST_FAULT_DIR_ENV = "RAFTSET_TEST_FAULT_DIR"
TEST_FAULT_POLL_S = 0.1


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


def classify(exc: BaseException) -> Outcome:
    return "expected" if isinstance(exc, RETRYABLE) else "unexpected"


Step = Callable[[], Awaitable[float | None]]  # one round; returns its own next delay, or None for the interval


class Loops:
    """The imperative shell: runs each loop's rounds and keeps its LoopHealth.

    `counters()` and `health()` are the small interface metrics read (loop errors by loop and kind).
    """

    def __init__(self, stall: float, *, on_error: Callable[[str, str, BaseException], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, env: Mapping[str, str] | None = None) -> None:
        self.stall = stall
        self.on_error = on_error  # (loop, expected|unexpected, error): the agent's last_error, metrics
        self.clock = clock
        self._health: dict[str, LoopHealth] = {}
        self._fault_dir = (os.environ if env is None else env).get(TEST_FAULT_DIR_ENV) or ""

    def health(self) -> list[LoopHealth]:
        return list(self._health.values())

    def counters(self) -> dict[tuple[str, str], int]:
        """(loop, expected|unexpected) -> errors so far."""
        out: dict[tuple[str, str], int] = {}
        for h in self._health.values():
            out[(h.name, "expected")] = h.expected_errors
            out[(h.name, "unexpected")] = h.unexpected_errors
        return out

    def liveness(self) -> Liveness:
        return liveness(self.health(), self.clock())

    def beat(self, name: str) -> None:
        """The running round of `name` made progress."""
        health = self._health.get(name)
        if health is not None:
            self._health[name] = progressed(health, self.clock())

    def reporter(self, name: str) -> Callable[[], None]:
        """`beat(name)` for a round's long work, callable from any thread: a backup moves its bytes
        in worker threads, and LoopHealth is only ever replaced on the event loop's thread."""
        loop = asyncio.get_running_loop()
        return lambda: loop.call_soon_threadsafe(self.beat, name)

    async def run(self, name: str, interval: float, step: Step, stopping: asyncio.Event) -> None:
        """Run `step` until `stopping` is set; never raises (a dead loop is recorded, not propagated)."""
        self._health[name] = started(name, bound_for(interval, self.stall), self.clock())
        backoff = Backoff(1.0, max(1.0, min(30.0, self.stall / 2)))
        try:
            while not stopping.is_set():
                delay = await self._round(name, step, backoff)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), timeout=interval if delay is None else delay)
        except asyncio.CancelledError:
            if not stopping.is_set():
                self._health[name] = ended(self._health[name], "cancelled")
            raise
        except BaseException as exc:  # noqa: BLE001 - recorded so that /livez fails, then re-raised
            self._health[name] = ended(self._health[name], f"{type(exc).__name__}: {exc}")
            log.critical("%s loop ended", name, exc_info=True)
            raise

    async def _round(self, name: str, step: Step, backoff: Backoff) -> float | None:
        try:
            await self._test_fault(name)
            delay = await step()
        except RETRYABLE as exc:
            self._health[name] = after_round(self._health[name], "expected", self.clock(), str(exc))
            if self.on_error is not None:
                self.on_error(name, "expected", exc)
            return None
        except Exception as exc:  # noqa: BLE001 - the point of supervision: log, count, back off, go on
            self._health[name] = after_round(self._health[name], "unexpected", self.clock(),
                                             f"{type(exc).__name__}: {exc}")
            log.exception("%s loop: unexpected error (retrying with backoff)", name)
            if self.on_error is not None:
                self.on_error(name, "unexpected", exc)
            return backoff.next()
        backoff.reset()
        self._health[name] = after_round(self._health[name], "ok", self.clock())
        return delay

    async def _test_fault(self, name: str) -> None:
        await self.test_hold(name)
        if self._fault_dir and os.path.exists(os.path.join(self._fault_dir, f"{name}.raise")):
            raise RuntimeError(f"test fault in the {name} loop")

    async def test_hold(self, point: str) -> None:
        """Test-only: wait here while `<point>.hang` exists in the fault directory (a loop's name
        holds its next round; a step's point, such as `clean-locked`, holds that step)."""
        if not self._fault_dir:
            return
        hang = os.path.join(self._fault_dir, f"{point}.hang")
        if os.path.exists(hang):
            log.warning("%s: test fault: hanging until %s is removed", point, hang)
            holding = os.path.join(self._fault_dir, f"{point}.hanging")
            open(holding, "w").close()
            try:
                while os.path.exists(hang):
                    await asyncio.sleep(TEST_FAULT_POLL_S)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(holding)
            log.warning("%s: test fault: released", point)
