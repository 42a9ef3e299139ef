"""The API gate: a spec change's calls pass everything queued; among equals the reconcile that began first."""

from __future__ import annotations

import asyncio

import pytest

from raftset.operator import apiorder

pytestmark = pytest.mark.unit


async def _run(gate: apiorder.Gate, order: apiorder.Order, log: list[str], name: str, calls: int,
               release: asyncio.Event) -> None:
    for i in range(calls):
        async with gate.slot(order):
            log.append(f"{name}{i}")
            await release.wait()


def test_waiting_calls_go_by_urgency_then_by_when_their_reconcile_began() -> None:
    async def scenario() -> list[str]:
        gate, log, release = apiorder.Gate(1), [], asyncio.Event()
        running = asyncio.create_task(_run(gate, (apiorder.BACKGROUND, 0), log, "busy", 1, release))
        await asyncio.sleep(0)
        tasks = [asyncio.create_task(_run(gate, order, log, name, 2, release)) for name, order in (
            ("resume", (apiorder.BACKGROUND, 1)), ("create", (apiorder.CREATION, 3)),
            ("change", (apiorder.SPEC_CHANGE, 5)), ("create-earlier", (apiorder.CREATION, 2)))]
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
            async with gate.slot((apiorder.BACKGROUND, 0)):
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
        first = asyncio.create_task(_run(gate, (apiorder.BACKGROUND, 0), log, "first", 1, release))
        await asyncio.sleep(0)
        cancelled = asyncio.create_task(_run(gate, (apiorder.SPEC_CHANGE, 1), log, "cancelled", 1, release))
        later = asyncio.create_task(_run(gate, (apiorder.BACKGROUND, 2), log, "later", 1, release))
        await asyncio.sleep(0)
        cancelled.cancel()
        release.set()
        await asyncio.gather(first, later)
        async with gate.slot((apiorder.BACKGROUND, 3)):  # the slot came back
            log.append("after")
        return log

    assert asyncio.run(scenario()) == ["first0", "later0", "after"]


def test_a_reconcile_takes_its_order_when_it_begins() -> None:
    async def scenario() -> tuple[apiorder.Order, apiorder.Order, apiorder.Order]:
        outside = apiorder.CURRENT.get()
        token = apiorder.begin(apiorder.SPEC_CHANGE)
        first = apiorder.CURRENT.get()
        apiorder.CURRENT.reset(token)
        token = apiorder.begin(apiorder.SPEC_CHANGE)
        second = apiorder.CURRENT.get()
        apiorder.CURRENT.reset(token)
        assert apiorder.CURRENT.get() == outside
        return outside, first, second

    outside, first, second = asyncio.run(scenario())
    assert outside[0] == apiorder.BACKGROUND
    assert first[0] == second[0] == apiorder.SPEC_CHANGE and first < second


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
