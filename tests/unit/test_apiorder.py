"""The API gate: a spec change's calls pass everything queued; among equals the reconcile that began first;
a reconcile waiting for its cluster lends its urgency to the one running."""

from __future__ import annotations

import asyncio

import pytest

from raftset.operator.io import apiorder

pytestmark = pytest.mark.unit


async def _run(gate: apiorder.Gate, lane: apiorder.Lane, log: list[str], name: str, calls: int,
               release: asyncio.Event) -> None:
    for i in range(calls):
        async with gate.slot(lane):
            log.append(f"{name}{i}")
            await release.wait()


def test_waiting_calls_go_by_urgency_then_by_when_their_reconcile_began() -> None:
    async def scenario() -> list[str]:
        gate, log, release = apiorder.Gate(1), [], asyncio.Event()
        running = asyncio.create_task(_run(gate, apiorder.Lane(apiorder.BACKGROUND, 0), log, "busy", 1, release))
        await asyncio.sleep(0)
        tasks = [asyncio.create_task(_run(gate, lane, log, name, 2, release)) for name, lane in (
            ("resume", apiorder.Lane(apiorder.BACKGROUND, 1)), ("create", apiorder.Lane(apiorder.CREATION, 3)),
            ("change", apiorder.Lane(apiorder.SPEC_CHANGE, 5)), ("create-earlier", apiorder.Lane(apiorder.CREATION, 2)))]
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(running, *tasks)
        return log

    # Between two calls of one reconcile the freed slot goes to the next waiter: the spec change's second
    # call waits for one call, not for the queue.
    assert asyncio.run(scenario()) == ["busy0", "change0", "create-earlier0", "change1", "create-earlier1",
                                       "create0", "resume0", "create1", "resume1"]


def test_no_more_than_width_calls_at_once() -> None:
    async def scenario() -> int:
        gate, most, now = apiorder.Gate(3), 0, 0

        async def call() -> None:
            nonlocal most, now
            async with gate.slot(apiorder.Lane(apiorder.BACKGROUND, 0)):
                now += 1
                most = max(most, now)
                await asyncio.sleep(0.001)
                now -= 1

        await asyncio.gather(*(call() for _ in range(20)))
        return most

    assert asyncio.run(scenario()) == 3


def test_a_cancelled_waiter_gives_up_its_place_and_the_slot_is_not_lost() -> None:
    async def scenario() -> list[str]:
        gate, log, release = apiorder.Gate(1), [], asyncio.Event()
        first = asyncio.create_task(_run(gate, apiorder.Lane(apiorder.BACKGROUND, 0), log, "first", 1, release))
        await asyncio.sleep(0)
        cancelled = asyncio.create_task(_run(gate, apiorder.Lane(apiorder.SPEC_CHANGE, 1), log, "cancelled", 1, release))
        later = asyncio.create_task(_run(gate, apiorder.Lane(apiorder.BACKGROUND, 2), log, "later", 1, release))
        await asyncio.sleep(0)
        cancelled.cancel()
        release.set()
        await asyncio.gather(first, later)
        async with gate.slot(apiorder.Lane(apiorder.BACKGROUND, 3)):  # the slot came back
            log.append("after")
        return log

    assert asyncio.run(scenario()) == ["first0", "later0", "after"]


def test_a_turn_puts_its_calls_in_a_new_lane_and_gives_it_back() -> None:
    async def scenario() -> tuple[apiorder.Lane, apiorder.Lane, apiorder.Lane, apiorder.Lane]:
        turns = apiorder.Turns(apiorder.Gate(1))
        outside = apiorder.CURRENT.get()
        async with turns.take(apiorder.SPEC_CHANGE) as first:
            assert apiorder.CURRENT.get() is first
        async with turns.take(apiorder.SPEC_CHANGE) as second:
            pass
        return outside, first, second, apiorder.CURRENT.get()

    outside, first, second, after = asyncio.run(scenario())
    assert outside.urgency == apiorder.BACKGROUND and after is outside
    assert first.urgency == second.urgency == apiorder.SPEC_CHANGE and first.order < second.order


def test_one_reconcile_of_a_cluster_at_a_time() -> None:
    async def scenario() -> list[str]:
        turns, log = apiorder.Turns(apiorder.Gate(1)), []

        async def reconcile(name: str) -> None:
            async with turns.take(apiorder.BACKGROUND):
                log.append(f"{name} in")
                await asyncio.sleep(0.001)
                log.append(f"{name} out")

        await asyncio.gather(reconcile("a"), reconcile("b"))
        return log

    assert asyncio.run(scenario()) == ["a in", "a out", "b in", "b out"]


def _cluster_scenario(second_urgency: int, calls: int, burst: int) -> list[str]:
    """One slot, held by a busy call. A background reconcile of the cluster ("timer", `calls` calls)
    waits for it, `burst` new clusters' calls queue behind, then a second reconcile of the same
    cluster comes with `second_urgency`. The order in which the calls got the slot."""
    async def scenario() -> list[str]:
        gate, log, release = apiorder.Gate(1), [], asyncio.Event()
        turns = apiorder.Turns(gate)
        busy = asyncio.create_task(_run(gate, apiorder.Lane(apiorder.BACKGROUND), log, "busy", 1, release))
        await asyncio.sleep(0)

        async def reconcile(name: str, urgency: int) -> None:
            async with turns.take(urgency) as lane:
                await _run(gate, lane, log, name, calls, release)

        timer = asyncio.create_task(reconcile("timer", apiorder.BACKGROUND))
        await asyncio.sleep(0)
        new = [asyncio.create_task(_run(gate, apiorder.Lane(apiorder.CREATION), log, f"new{i}-", 1, release))
               for i in range(burst)]
        await asyncio.sleep(0)
        second = asyncio.create_task(reconcile("second", second_urgency))
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(busy, timer, second, *new)
        return log

    return asyncio.run(scenario())


def test_a_spec_change_waiting_for_its_cluster_hastens_the_reconcile_running_there() -> None:
    """The background reconcile that holds the cluster's turn goes past a burst of new clusters' calls,
    so the spec change behind it waits for one reconcile's calls, not for the burst."""
    # Without the loan: busy0, new0..new4, timer0, timer1, second0, second1. With it, each of the timer's and
    # the change's calls waits only for calls handed a slot before it asked (the change asks after the timer
    # gives back the turn, by which time two calls of the burst have been handed the slot).
    assert _cluster_scenario(apiorder.SPEC_CHANGE, calls=2, burst=5) == [
        "busy0", "timer0", "new0-0", "timer1", "new1-0", "new2-0", "second0", "new3-0", "second1", "new4-0"]


def test_without_a_waiter_the_running_reconcile_keeps_its_place() -> None:
    # the second reconcile is no more urgent than the timer: nothing is lent
    assert _cluster_scenario(apiorder.BACKGROUND, calls=1, burst=1) == ["busy0", "new0-0", "timer0", "second0"]


def test_a_reconcile_that_gets_the_turn_before_a_more_urgent_waiter_takes_its_urgency() -> None:
    async def scenario() -> list[int]:
        turns, urgencies, hold = apiorder.Turns(apiorder.Gate(1)), [], asyncio.Event()

        async def reconcile(urgency: int) -> None:
            async with turns.take(urgency) as lane:
                urgencies.append(lane.urgency)
                await hold.wait()

        first = asyncio.create_task(reconcile(apiorder.BACKGROUND))
        await asyncio.sleep(0)
        queued = [asyncio.create_task(reconcile(urgency)) for urgency in (apiorder.BACKGROUND, apiorder.SPEC_CHANGE)]
        await asyncio.sleep(0)
        hold.set()
        await asyncio.gather(first, *queued)
        return urgencies

    # the first was hastened while running, but its lane was already recorded at the start
    assert asyncio.run(scenario()) == [apiorder.BACKGROUND, apiorder.SPEC_CHANGE, apiorder.SPEC_CHANGE]


def test_a_cancelled_waiter_lends_nothing_to_later_turns() -> None:
    async def scenario() -> int:
        turns, hold = apiorder.Turns(apiorder.Gate(1)), asyncio.Event()

        async def reconcile(urgency: int) -> None:
            async with turns.take(urgency):
                await hold.wait()

        first = asyncio.create_task(reconcile(apiorder.BACKGROUND))
        await asyncio.sleep(0)
        cancelled = asyncio.create_task(reconcile(apiorder.SPEC_CHANGE))
        await asyncio.sleep(0)
        cancelled.cancel()
        hold.set()
        await first
        async with turns.take(apiorder.BACKGROUND) as lane:
            return lane.urgency

    assert asyncio.run(scenario()) == apiorder.BACKGROUND


@pytest.mark.parametrize(("given", "generation", "observed", "expected"), [
    (apiorder.BACKGROUND, 1, None, apiorder.CREATION),  # the loop reconciles a new cluster first
    (apiorder.SPEC_CHANGE, 1, None, apiorder.SPEC_CHANGE),
    (apiorder.BACKGROUND, 4, 3, apiorder.SPEC_CHANGE),  # a spec change, whoever reconciles it
    (apiorder.CREATION, 4, 3, apiorder.SPEC_CHANGE),
    (apiorder.BACKGROUND, 4, 4, apiorder.BACKGROUND),  # at rest, a restart's resume, a resync
    (apiorder.SPEC_CHANGE, 4, 4, apiorder.SPEC_CHANGE),
])
def test_a_spec_no_reconcile_observed_is_urgent_whoever_reconciles_it(given: int, generation: int,
                                                                     observed: int | None, expected: int) -> None:
    assert apiorder.urgency_of(given, generation, observed) == expected
