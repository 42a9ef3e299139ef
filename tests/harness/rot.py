"""Rotten data for the corruption tests (a CORRUPT alarm, the periodic hash check), and what they look at.

The corruption is real: a value's bytes are changed in a stopped member's bbolt file (bbolt keeps no
checksum of its data pages, so the store starts and serves the wrong value).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from raftset import contract
from raftset.sidecar.io.etcdclient import Alarm, MemberClient
from raftset.replace import parse_progress
from tests.harness.checker import Writer
from tests.harness.lab import Lab, Pod
from tests.harness.scenarios import grow
from tests.harness.waiting import await_for, wait_for

GOOD = "raftset-rot-AAAAAAAAAAAAAAAA"
ROTTEN = "raftset-rot-BBBBBBBBBBBBBBBB"  # the same length: only the value's bytes change


@contextlib.asynccontextmanager
async def kubelet_restarts(*pods: Pod) -> AsyncIterator[None]:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(p.restart_always(stop)) for p in pods]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)


def events(lab: Lab) -> list[Any]:
    items = lab.core.list_namespaced_event(lab.namespace).items
    return sorted((e for e in items if e.source and e.source.component == "raftset-sidecar"),
                  key=lambda e: int(e.metadata.resource_version))


def annotations(lab: Lab, ordinal: int) -> dict[str, str]:
    return lab.pod_object(ordinal).metadata.annotations or {}


async def alarms(lab: Lab, ordinal: int = 0) -> list[Alarm]:
    async with MemberClient(lab.pod(ordinal).client_url, lab.client_tls()) as client:
        return await client.alarms()


def holds(lab: Lab, ordinal: int, value: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await lab.get("/rot", ordinal) == value.encode()
    return check


def cleared(lab: Lab, ordinal: int) -> Callable[[], Awaitable[bool]]:
    """The replace record finished (it stays on the pod for the operator to tell) and the leader's verdict
    gone from the pod."""
    async def check() -> bool:
        found = await asyncio.to_thread(annotations, lab, ordinal)
        record = parse_progress(found.get(contract.ANNOTATION_REPLACE_PROGRESS))
        return (record is None or record.finished) and contract.ANNOTATION_CORRUPTION not in found
    return check


def replaced(lab: Lab, pod: Pod, old: int, *asked: int) -> Callable[[], Awaitable[int | None]]:
    """The pod's new member id once it votes beside the other two (MemberList from `asked`)."""
    async def probe() -> int | None:
        members = await lab.members(*asked)
        mine = [m for m in members if m.name == pod.name]
        voting = [m for m in members if m.started and not m.is_learner]
        return mine[0].id if len(voting) == 3 and mine and mine[0].id != old else None
    return probe


async def ids_by_name(lab: Lab) -> dict[str, int]:
    return {m.name: m.id for m in await lab.members(0, 1, 2)}


async def writing(lab: Lab, *ordinals: int) -> Writer:
    writer = Writer([lab.pod(o).client_url for o in ordinals], lab.client_tls())
    writer.start()
    wait_for(lambda: writer.ok > 20, 10, "the writer running")
    return writer


async def follower_holding_good(lab: Lab) -> tuple[dict[str, int], Writer]:
    """Three voting members led by demo-0, demo-2 holding GOOD, a writer on demo-0 and demo-1:
    the start of every test that rots demo-2. Returns the member ids by name and the writer."""
    await grow(lab, 3)
    await lab.move_leader_to(0)
    ids = await ids_by_name(lab)
    await lab.put("/rot", GOOD, 0)
    await await_for(holds(lab, 2, GOOD), 10, "the value on demo-2")
    return ids, await writing(lab, 0, 1)


def rot(pod: Pod) -> None:
    """Stop the store, change the value's bytes in its bbolt file, start it again."""
    store = pod.store
    assert store is not None
    store.send_signal(signal.SIGTERM)
    store.wait(30)
    db = pod.data_dir / "member" / "snap" / "db"
    data = db.read_bytes()
    assert data.count(GOOD.encode()) >= 1, "the value is in the follower's bbolt file"
    db.write_bytes(data.replace(GOOD.encode(), ROTTEN.encode()))
    pod.start_store()
