"""The repair shell's self-removal runs under the membership lock's fence, like join, clean and leave."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from datetime import datetime, timezone
from typing import Any

import pytest

from raftset.sidecar.io.etcdclient import LockLost
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells.replace import ReplaceShell
from tests.unit.sidecar_data import member, mid, status
from tests.unit.test_sidecar_replace import view

pytestmark = pytest.mark.unit

OWN = mid(1)
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Recorder:
    """The lock, client and ports of one removal, writing down what happened in order."""

    def __init__(self, *, lock_lost: bool = False) -> None:
        self.events: list[str] = []
        self.lock_lost = lock_lost
        self.timeout = 5.0  # the client's per-call timeout: what the fence must leave on the lock

    # the held lock
    async def fence(self, needed: float) -> None:
        self.events.append(f"fence {needed:g}s")
        if self.lock_lost:
            raise LockLost("http://demo-2:2379", "membership", "the lock's lease expired or was revoked")

    # the member client
    @contextlib.asynccontextmanager
    async def lock(self, name: str, *, timeout: float | None = None) -> AsyncIterator[Recorder]:
        self.events.append("lock")
        yield self
        self.events.append("unlock")

    async def member_list(self) -> list[Any]:
        return [member(o) for o in range(3)]

    # the peers, the API and the rejoin port
    async def authoritative_members(self, urls: list[str]) -> tuple[Recorder, list[Any], bool]:
        return self, await self.member_list(), True

    async def statuses(self, members: list[Any]) -> dict[int, Any]:
        return {mid(o): status(o) for o in range(3)}

    async def member_remove(self, client: Recorder, member_id: int) -> None:
        self.events.append(f"remove {member_id:x}")

    async def rejoin(self, reason: str) -> None:
        self.events.append("rejoin")

    async def annotate_pod(self, name: str, body: dict[str, Any]) -> None:
        pass


def repairer(recorder: Recorder) -> ReplaceShell:
    settings = SimpleNamespace(client_url="http://demo-1:2379", pod_name="demo-1")
    peers = SimpleNamespace(
        candidates=lambda kept, extra: [f"http://demo-{o}:2379" for o in kept],
        authoritative_members=recorder.authoritative_members, statuses=recorder.statuses,
        member_remove=recorder.member_remove)
    return ReplaceShell(settings, State.initial("demo-1", NOW), peers, recorder,  # type: ignore[arg-type]
                        rejoin=recorder.rejoin)


async def test_the_removal_goes_only_after_the_fence_under_the_lock() -> None:
    recorder = Recorder()
    await repairer(recorder).remove_self(OWN, [0, 1, 2], view(own=OWN))
    assert recorder.events == ["lock", "fence 5s", f"remove {OWN:x}", "unlock", "rejoin"]


async def test_a_lock_lost_before_the_removal_removes_nothing() -> None:
    recorder = Recorder(lock_lost=True)
    with pytest.raises(LockLost):
        await repairer(recorder).remove_self(OWN, [0, 1, 2], view(own=OWN))
    assert not any(e.startswith(("remove", "rejoin")) for e in recorder.events), recorder.events
