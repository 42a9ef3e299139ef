"""The replace shell through its ports: its self-removal runs under the membership lock's fence, like join, clean
and leave; a member removed behind its back, or replaced on request, joins again through the rejoin port."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from raftset import contract
from raftset.replace import parse_progress
from raftset.sidecar.io.etcdclient import LockLost
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells.replace import ReplaceShell
from tests.unit.sidecar_data import member, mid, status
from tests.unit.sidecar_ports import FakeKube, FakePeers, FakeRaft, fresh_state, settings, three_voters, workload
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


def replace_shell(tmp_path: Path, raft: FakeRaft, rejoined: list[str], *, pod: dict[str, Any] | None = None,
                  linearizable: bool = True) -> tuple[ReplaceShell, FakeKube]:
    config = settings(1, tmp_path)
    kube = FakeKube(pods={"demo-1": pod or {"metadata": {"name": "demo-1"}}})

    async def rejoin(reason: str) -> None:
        rejoined.append(reason)

    state = fresh_state(1, phase="started", startup_written=True, member_id=OWN, status=raft.statuses.get(OWN))
    peers = FakePeers(raft, config, workload(3), linearizable=linearizable)
    return ReplaceShell(config, state, peers, kube, rejoin=rejoin), kube  # type: ignore[arg-type]


async def test_a_member_removed_behind_its_back_joins_again_through_the_rejoin_port(tmp_path: Path) -> None:
    raft = FakeRaft([member(0), member(2)], {mid(0): status(0), mid(2): status(2), OWN: None})
    rejoined: list[str] = []
    shell, _ = replace_shell(tmp_path, raft, rejoined)
    await shell.round()
    assert len(rejoined) == 1 and f"{OWN:x}" in rejoined[0]


async def test_a_member_still_listed_or_a_view_not_authoritative_keeps_the_premise(tmp_path: Path) -> None:
    rejoined: list[str] = []
    listed = three_voters(down=[1])
    shell, _ = replace_shell(tmp_path, listed, rejoined)
    await shell.round()
    gone = FakeRaft([member(0), member(2)], {mid(0): status(0), mid(2): status(2), OWN: None})
    shell, _ = replace_shell(tmp_path, gone, rejoined, linearizable=False)
    await shell.round()
    assert rejoined == []


async def test_a_replace_request_records_its_steps_on_the_pod_and_rejoins_once_removed(tmp_path: Path) -> None:
    raft = three_voters()
    rejoined: list[str] = []
    asked = {"metadata": {"name": "demo-1", "annotations": {contract.ANNOTATION_REPLACE: "true"}}}
    shell, kube = replace_shell(tmp_path, raft, rejoined, pod=asked)
    await shell.round()
    assert raft.calls == ["lock", "fence", f"remove {OWN:x}", "unlock"]
    assert len(rejoined) == 1
    progress = parse_progress(kube.pods["demo-1"]["metadata"]["annotations"][contract.ANNOTATION_REPLACE_PROGRESS])
    assert progress is not None and progress.phase == contract.ReplacePhase.REJOINING
