"""Issue 28, item 1: a cluster's alarm, rung by an event or gone off at its wake-up time."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from raftset.operator.alarms import ClusterAlarm
from raftset.operator.pure.wakeup import Wake

pytestmark = pytest.mark.unit


def _in(seconds: float) -> Wake:
    return Wake(datetime.now(timezone.utc) + timedelta(seconds=seconds))


async def test_a_ring_ends_the_sleep_at_once() -> None:
    alarm = ClusterAlarm()
    alarm.set(_in(3600))
    sleeper = asyncio.create_task(alarm.sleep())
    await asyncio.sleep(0.01)
    assert not sleeper.done()
    alarm.ring()
    await asyncio.wait_for(sleeper, 1)


async def test_a_ring_during_a_round_is_kept_for_the_next_sleep() -> None:
    alarm = ClusterAlarm()
    alarm.ring()
    alarm.set(_in(3600))  # the round that was running when it rang sets the alarm afterwards
    await asyncio.wait_for(alarm.sleep(), 1)


async def test_the_wake_up_time_ends_the_sleep() -> None:
    alarm = ClusterAlarm()
    alarm.set(_in(0.05))
    await asyncio.wait_for(alarm.sleep(), 1)


async def test_an_earlier_wake_up_set_while_asleep_is_kept() -> None:
    alarm = ClusterAlarm()
    alarm.set(_in(3600))
    sleeper = asyncio.create_task(alarm.sleep())
    await asyncio.sleep(0.01)
    alarm.set(_in(0.02))  # e.g. kopf's spec-change handler's round started a step
    await asyncio.wait_for(sleeper, 1)


async def test_without_a_wake_up_only_a_ring_ends_the_sleep() -> None:
    alarm = ClusterAlarm()
    sleeper = asyncio.create_task(alarm.sleep())
    await asyncio.sleep(0.05)
    assert not sleeper.done()
    alarm.ring()
    await asyncio.wait_for(sleeper, 1)
