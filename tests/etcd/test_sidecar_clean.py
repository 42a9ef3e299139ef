"""Membership-clean with real etcd: vanished members go after the grace, nothing goes without quorum."""

from __future__ import annotations

import asyncio

import pytest

from raftset.etcdclient import MemberClient
from tests.harness.scenarios import grow
from tests.harness.waiting import await_for

pytestmark = pytest.mark.etcd


@pytest.mark.lifecycle
async def test_clean_removes_a_vanished_undesired_member_after_the_grace(make_lab) -> None:
    lab = make_lab(replicas=3, clean_grace=3.0)
    await grow(lab, 3)
    lab.scale(2)
    lab.pod(2).kill()  # gone without a leave: node lost, pod force-deleted
    members = await lab.wait_voting(2, 30, 0, 1)
    assert sorted(m.name for m in members) == ["demo-0", "demo-1"]
    await lab.logged("clean: removed member", 0, 1)  # only the leader cleans


async def test_clean_removes_nothing_when_two_of_three_members_are_down(make_lab) -> None:
    lab = make_lab(replicas=3, clean_grace=2.0)
    await grow(lab, 3)
    await lab.move_leader_to(0)
    lab.scale(1)
    lab.pod(1).kill()
    lab.pod(2).kill()
    await asyncio.sleep(8)  # four grace periods, eight clean rounds
    members = await lab.members(0, linearizable=False)  # no quorum: its own view
    assert len(members) == 3
    log = lab.pod(0).sidecar_log.read_text()
    assert "clean: removed member" not in log
    assert lab.pod(0).heartbeat()["role"] in ("unknown", "follower")
    assert not lab.pod(0).ready()


async def test_clean_removes_a_never_started_learner_of_a_kept_ordinal_after_the_grace(make_lab) -> None:
    """Fault h: ordinal 2 is kept, its learner entry was added but its store never started."""
    lab = make_lab(replicas=3, clean_grace=3.0)
    await grow(lab, 2)
    async with MemberClient(lab.pod(0).client_url) as client:
        # Refused as "unhealthy cluster" until the voters have been connected for 5 s.
        added, _ = await await_for(lambda: client.add_learner(f"http://{lab.pod(2).ip}:2380"), 20,
                                   "MemberAdd of a learner for ordinal 2")
    assert any(m.id == added.id and m.is_learner and not m.started for m in await lab.members(0, 1))
    await lab.logged(f"clean: removed member {added.hex_id}", 0, 1, timeout=30)
    assert all(m.id != added.id for m in await lab.members(0, 1))
    # Nothing blocks the ordinal's own join any more.
    lab.pod(2).start()
    lab.pod(2).wait_ready()
    members = await lab.wait_voting(3)
    assert added.id not in {m.id for m in members}
