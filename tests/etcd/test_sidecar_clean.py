"""Membership-clean with real etcd: vanished members go after the grace, nothing goes without quorum."""

from __future__ import annotations

import asyncio

import pytest

from tests.harness.scenarios import grow

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
