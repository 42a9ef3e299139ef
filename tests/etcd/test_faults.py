"""Faults with real etcd and real sidecars: a member cut off by the network, a paused member, a
rolling restart, a leader lost mid scale-in.

None may cost a member: a cut-off or paused member is still desired (the workload keeps its
ordinal), and a restarting pod is not leaving.
"""

from __future__ import annotations

import asyncio
import os
import signal

from collections.abc import Iterator
from pathlib import Path

import pytest

from raftset.etcdclient import MemberClient
from tests.harness.checker import Writer
from tests.harness.lab import Lab, wait_for
from tests.harness.scenarios import check_members, grow, restart_in_place
from tests.harness.toxiproxy import Toxiproxy, client_proxy_name, peer_proxy_name, route_client, route_peers
from tests.harness.waiting import await_for

pytestmark = pytest.mark.etcd

STALL_BOUND_S = 5.0


def member_ids(members: list) -> set[str]:
    return {f"{m.id:x}" for m in members}


@pytest.fixture
def toxiproxy(tmp_path: Path) -> Iterator[Toxiproxy]:
    with Toxiproxy(tmp_path / "toxiproxy") as proxy:
        yield proxy


async def kept_and_caught_up(lab: Lab, writer: Writer, before: set[str]) -> None:
    """After the fault on ordinal 2: it serves again with the same member, no write failed or stalled,
    no clean removed anything, and every acknowledged write reads back."""
    lab.pod(2).wait_ready()
    writer.stop()
    assert writer.failed == 0, writer.errors[:5]
    assert writer.longest_stall < STALL_BOUND_S, f"writes stalled {writer.longest_stall:.2f}s"
    await lab.wait_voting(3)
    assert member_ids(await lab.members(2)) == before
    assert not any("clean: removed member" in lab.pod(o).sidecar_log.read_text() for o in range(3))
    await check_members(lab, writer, 0, 1, 2)


async def test_a_member_the_network_cuts_off_from_the_leader_is_kept_and_catches_up(
        make_lab, toxiproxy: Toxiproxy) -> None:
    """A real partition behind Toxiproxy: leader 0 and ordinal 2 exchange nothing, ordinal 2's clients
    (the leader's sidecar among them) reach nothing. One proxy sits in front of each member's peer
    port, and etcd peers dial each other both ways, so a link is cut only where the proxies of both
    ends are: 0's and 2's go, 1's stays and carries 0<->1 (and 1<->2, which never makes 2 a leader:
    1 hears the leader and refuses its pre-votes). Disabling 2's proxy alone cut nothing: 2 kept
    every index of the leader through its own dials."""
    lab = make_lab(replicas=3, clean_grace=2.0)
    route_peers(lab, toxiproxy, range(3))
    direct = route_client(lab, toxiproxy, 2)
    await grow(lab, 3)
    await lab.move_leader_to(0)
    before = member_ids(await lab.members(0))
    writer = Writer([lab.pod(0).client_url, lab.pod(1).client_url])
    writer.start()
    wait_for(lambda: writer.ok > 20, 20, "writer running")
    cut = (peer_proxy_name(0), peer_proxy_name(2), client_proxy_name(2))
    for name in cut:
        toxiproxy.set_enabled(name, False)
    try:
        wait_for(lambda: not lab.pod(2).ready(), 20, "the cut-off member to report not ready")

        async def behind() -> bool:
            async with MemberClient(direct, timeout=3) as store:  # past the proxy: the test's view only
                own = (await store.status()).raft_index
            return (await lab.status(0)).raft_index > own + 100
        await await_for(behind, 30, "ordinal 2 behind the leader by 100 entries: no append reaches it")
        await asyncio.sleep(6)  # three clean grace periods
        await lab.rounds_pass("clean", [0])  # and the leader's clean decided on them since
        assert (await lab.status(0)).is_leader
        assert member_ids(await lab.members(0)) == before, "clean removed a desired member"
    finally:
        for name in cut:
            toxiproxy.set_enabled(name, True)
    await kept_and_caught_up(lab, writer, before)


async def test_a_paused_member_is_kept_and_catches_up(make_lab) -> None:
    """SIGSTOP freezes the store (a stalled process or VM): it answers neither peers nor clients."""
    lab = make_lab(replicas=3, clean_grace=2.0)
    await grow(lab, 3)
    await lab.move_leader_to(0)
    before = member_ids(await lab.members(0))
    store = lab.pod(2).store
    assert store is not None
    writer = Writer([lab.pod(0).client_url, lab.pod(1).client_url])
    writer.start()
    os.kill(store.pid, signal.SIGSTOP)  # frozen: no answer to peers or clients
    try:
        wait_for(lambda: not lab.pod(2).ready(), 20, "the paused member to report not ready")
        await asyncio.sleep(6)  # three clean grace periods
        await lab.rounds_pass("clean", [0])  # and the leader's clean decided on them since
        assert member_ids(await lab.members(0)) == before, "clean removed a desired member"
    finally:
        os.kill(store.pid, signal.SIGCONT)
    await kept_and_caught_up(lab, writer, before)


async def test_rolling_restart_keeps_every_member_and_writes_flow(make_lab) -> None:
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    await lab.move_leader_to(1)
    before = member_ids(await lab.members(0))
    writer = Writer([lab.pod(o).client_url for o in range(3)])
    writer.start()
    # The StatefulSet's rolling update: highest ordinal first, one pod at a time, each
    # back and ready before the next; replicas never change.
    for ordinal in (2, 1, 0):
        await restart_in_place(lab, ordinal)
    writer.stop()
    assert member_ids(await lab.members(0)) == before
    assert writer.failed == 0, writer.errors[:5]
    assert writer.longest_stall < STALL_BOUND_S, f"writes stalled {writer.longest_stall:.2f}s"
    assert writer.ok > 100
    await check_members(lab, writer, 0, 1, 2)


async def test_leader_lost_during_scale_in_keeps_quorum_then_converges(make_lab) -> None:
    lab = make_lab(replicas=3, clean_grace=3.0)
    await grow(lab, 3)
    await lab.move_leader_to(0)
    before = member_ids(await lab.members(0))
    writer = Writer([lab.pod(0).client_url, lab.pod(1).client_url])  # its puts fail while quorum is lost
    writer.start()
    wait_for(lambda: writer.ok > 20, 10, "writer running")
    lab.scale(2)
    lab.pod(0).kill()  # the leader's node dies just as ordinal 2 is scaled away
    result = lab.pod(2).terminate()
    # Two of three members left: removing ordinal 2 now would leave one of two voters.
    assert result is not None and not result["removed"] and "quorum" in result["reason"], result
    assert member_ids(await lab.members(1, linearizable=False)) == before  # no quorum: its own view
    # kubelet brings the lost pod back; it rejoins with its data, and membership-clean
    # (the leader's sidecar) removes the member of ordinal 2, absent past the grace period.
    lab.pod(0).start()
    lab.pod(0).wait_ready()
    members = await lab.wait_voting(2, 60, 0, 1)
    assert sorted(m.name for m in members) == ["demo-0", "demo-1"]
    assert member_ids(members) < before
    await lab.logged("clean: removed member", 0, 1)
    written = writer.ok
    wait_for(lambda: writer.ok > written + 20, 20, "writes acknowledged by the two that stay")
    writer.stop()
    await check_members(lab, writer, 0, 1)
