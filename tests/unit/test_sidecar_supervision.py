"""Loop supervision (fault e): what counts as progress, when /livez fails, and the loop runner itself."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from raftset.etcdclient import Unreachable
from raftset.operator import manifests
from raftset.sidecar.kube import KubeError
from raftset.sidecar.supervision import (
    TEST_FAULT_DIR_ENV,
    Loops,
    after_round,
    bound_for,
    classify,
    ended,
    liveness,
    progressed,
    started,
)
from tests.unit.builders import cluster

pytestmark = pytest.mark.unit


def test_a_fresh_loop_is_alive_until_its_bound_passes_without_a_round() -> None:
    h = started("clean", bound=40.0, now=100.0)
    assert liveness([h], 140.0).alive
    verdict = liveness([h], 140.5)
    assert not verdict.alive
    assert verdict.problems == ("clean: no progress for 40s (bound 40s), a round has not finished",)


def test_finished_rounds_and_expected_errors_are_progress() -> None:
    h = started("heartbeat", bound=10.0, now=0.0)
    h = after_round(h, "ok", 8.0)
    h = after_round(h, "expected", 16.0, "Status at x: timed out")
    assert (h.rounds, h.expected_errors, h.unexpected_errors, h.last_progress) == (2, 1, 0, 16.0)
    assert h.last_error == "Status at x: timed out"
    assert liveness([h], 26.0).alive  # the API or a peer being down is readyz's business, not livez's
    assert after_round(h, "ok", 17.0).last_error == ""


def test_unexpected_errors_are_counted_but_are_not_progress() -> None:
    h = after_round(started("membership", bound=10.0, now=0.0), "ok", 1.0)
    h = after_round(h, "unexpected", 2.0, "KeyError: 'x'")
    h = after_round(h, "unexpected", 9.0, "KeyError: 'y'")
    assert (h.unexpected_errors, h.failing_since, h.last_progress, h.last_error) == (2, 2.0, 1.0, "KeyError: 'y'")
    assert liveness([h], 11.0).alive
    verdict = liveness([h], 11.5)
    assert not verdict.alive
    assert "membership: no progress for 10s" in verdict.problems[0] and "failing since 10s: KeyError: 'y'" \
        in verdict.problems[0]
    recovered = after_round(h, "ok", 12.0)
    assert recovered.failing_since is None and liveness([recovered], 12.0).alive


def test_a_loop_that_ended_is_dead_at_once_and_every_problem_is_named() -> None:
    alive = started("heartbeat", bound=10.0, now=0.0)
    dead = ended(started("promote", bound=10.0, now=0.0), "SystemExit: 3")
    stuck = started("clean", bound=5.0, now=0.0)
    verdict = liveness([alive, dead, stuck], 6.0)
    assert not verdict.alive
    assert verdict.problems[0] == "promote: loop ended: SystemExit: 3"
    assert verdict.problems[1].startswith("clean: no progress for 6s (bound 5s)")
    assert liveness([], 1e9).alive


def test_progress_inside_a_round_keeps_a_long_round_alive_until_it_stops_progressing() -> None:
    """A backup round far longer than the bound (a large snapshot over a slow link) is alive as
    long as its parts keep going up; once they stop for the bound, it is stuck like any hung round."""
    h = started("backup", bound=10.0, now=0.0)
    for now in (8.0, 16.0, 24.0):  # a part uploaded every 8 s, the round running for 24 s
        h = progressed(h, now)
        assert liveness([h], now + 9.0).alive
    assert h.rounds == 0 and h.last_progress == 24.0, "progress is not a finished round"
    verdict = liveness([h], 34.5)
    assert not verdict.alive
    assert verdict.problems == ("backup: no progress for 10s (bound 10s), a round has not finished",)


def test_bound_and_classification() -> None:
    assert bound_for(30.0, 120.0) == 150.0
    assert classify(Unreachable("u", "Status", "timed out")) == "expected"
    assert classify(KubeError("GET", "/x", 500, "boom")) == "expected"
    assert classify(TimeoutError()) == "expected"
    assert classify(KeyError("x")) == "unexpected"
    assert classify(RuntimeError("semaphore key disappeared")) == "unexpected"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_the_runner_retries_unexpected_errors_with_backoff_and_reports_them() -> None:
    clock, stopping = Clock(), asyncio.Event()
    reports: list[tuple[str, str]] = []
    outcomes = iter([KeyError("bug"), Unreachable("u", "Status", "down"), None, None, None])
    calls = 0

    async def step() -> float | None:
        nonlocal calls
        calls += 1
        outcome = next(outcomes, None)
        if outcome is not None:
            raise outcome
        if calls >= 4:
            stopping.set()
        return 0.0

    loops = Loops(2.0, on_error=lambda name, kind, _: reports.append((name, kind)), clock=clock, env={})
    await asyncio.wait_for(loops.run("clean", 0.0, step, stopping), timeout=10)
    (h,) = loops.health()
    assert (h.rounds, h.unexpected_errors, h.expected_errors, h.ended) == (4, 1, 1, None)
    assert reports == [("clean", "unexpected"), ("clean", "expected")]
    assert loops.counters() == {("clean", "expected"): 1, ("clean", "unexpected"): 1}


async def test_a_hanging_round_fails_liveness_and_a_crashed_loop_is_recorded(tmp_path: Path) -> None:
    clock, stopping = Clock(), asyncio.Event()

    async def step() -> None:
        return None

    loops = Loops(5.0, clock=clock, env={TEST_FAULT_DIR_ENV: str(tmp_path)})
    (tmp_path / "heartbeat.hang").touch()
    task = asyncio.create_task(loops.run("heartbeat", 1.0, step, stopping))
    await asyncio.sleep(0.05)
    clock.now = 6.0
    assert loops.liveness().alive
    clock.now = 6.5
    assert not loops.liveness().alive
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert loops.health()[0].ended == "cancelled"

    async def exits() -> None:
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        await loops.run("promote", 1.0, exits, stopping)
    assert "promote: loop ended: SystemExit: 3" in loops.liveness().problems


async def test_a_round_that_reports_progress_from_a_worker_thread_stays_alive() -> None:
    clock, stopping = Clock(), asyncio.Event()
    release = asyncio.Event()
    alive_after_each_part: list[bool] = []

    async def long_round() -> None:
        report = loops.reporter("backup")
        for _ in range(3):  # an upload's parts, each in a worker thread, each past the bound
            clock.now += 4.0
            await asyncio.to_thread(report)
            await asyncio.sleep(0)  # the loop runs the beat the thread handed it
            alive_after_each_part.append(loops.liveness().alive)
        await release.wait()

    loops = Loops(2.0, clock=clock, env={})
    task = asyncio.create_task(loops.run("backup", 1.0, long_round, stopping))
    await asyncio.wait_for(_until(lambda: len(alive_after_each_part) == 3), timeout=5)
    assert alive_after_each_part == [True, True, True]
    assert clock.now == 12.0 and loops.health()[0].rounds == 0, "one round, still running, 4x its bound"
    clock.now += 3.5  # no part for longer than the bound (1 + 2 s)
    assert not loops.liveness().alive
    stopping.set()
    release.set()
    await asyncio.wait_for(task, timeout=5)


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)


async def test_a_hung_round_says_it_holds_and_goes_on_once_its_file_is_removed(tmp_path: Path) -> None:
    """The e2e tier holds a state this way (tests/e2e/test_left_raft.py): it waits for
    `<loop>.hanging`, observes, then releases the loop by removing `<loop>.hang`."""
    stopping, rounds = asyncio.Event(), []

    async def step() -> float:
        rounds.append(len(rounds))
        return 0.0

    loops = Loops(5.0, env={TEST_FAULT_DIR_ENV: str(tmp_path)})
    (tmp_path / "repair.hang").touch()
    task = asyncio.create_task(loops.run("repair", 0.0, step, stopping))
    for _ in range(100):
        if (tmp_path / "repair.hanging").exists():
            break
        await asyncio.sleep(0.01)
    assert (tmp_path / "repair.hanging").exists() and rounds == []
    await asyncio.sleep(0.3)
    assert rounds == [] and loops.health()[0].rounds == 0, "held: no round ran while the file exists"
    (tmp_path / "repair.hang").unlink()
    for _ in range(100):
        if len(rounds) >= 3:
            break
        await asyncio.sleep(0.01)
    stopping.set()
    await asyncio.wait_for(task, timeout=5)
    assert len(rounds) >= 3 and not (tmp_path / "repair.hanging").exists()


@pytest.mark.parametrize("tls", ["auto", "disabled"])
def test_the_test_fault_hook_is_never_rendered_into_a_pod(tls: str) -> None:
    template = manifests.pod_template(cluster(tls={"provider": tls}))
    names = {e["name"] for c in [*template["spec"].get("initContainers", []), *template["spec"]["containers"]]
             for e in c.get("env", [])}
    assert "RAFTSET_POD_NAME" in names and TEST_FAULT_DIR_ENV not in names


async def test_a_step_holds_at_its_own_point_until_its_file_is_removed(tmp_path: Path) -> None:
    """Clean's `clean-locked` point (tests/etcd/test_membership_lock.py): the step waits there, says so,
    and goes on once released; without the fault directory the point costs nothing."""
    loops = Loops(5.0, env={TEST_FAULT_DIR_ENV: str(tmp_path)})
    (tmp_path / "clean-locked.hang").touch()
    held = asyncio.create_task(loops.test_hold("clean-locked"))
    for _ in range(100):
        if (tmp_path / "clean-locked.hanging").exists():
            break
        await asyncio.sleep(0.01)
    assert (tmp_path / "clean-locked.hanging").exists() and not held.done()
    (tmp_path / "clean-locked.hang").unlink()
    await asyncio.wait_for(held, timeout=5)
    assert not (tmp_path / "clean-locked.hanging").exists()
    await asyncio.wait_for(Loops(5.0, env={}).test_hold("clean-locked"), timeout=1)
    await asyncio.wait_for(loops.test_hold("another-point"), timeout=1)  # no file: no hold
