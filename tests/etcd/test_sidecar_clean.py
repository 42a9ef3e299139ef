"""Membership-clean with real etcd: vanished members go after the grace, nothing goes without quorum.

Every test ends with the acknowledged-write checker: a removal that cost a write, or left the
members disagreeing, fails it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftset.etcdclient import MemberClient
from tests.harness.checker import Writer
from tests.harness.lab import Lab, wait_for
from tests.harness.scenarios import check_members, grow, writing
from tests.harness.toxiproxy import Toxiproxy, client_proxy_name, route_client
from tests.harness.waiting import await_for

pytestmark = pytest.mark.etcd

@pytest.fixture
def toxiproxy(tmp_path: Path) -> Iterator[Toxiproxy]:
    with Toxiproxy(tmp_path / "toxiproxy") as proxy:
        yield proxy


def clean_outcomes(lab: Lab, ordinal: int) -> dict[str, float]:
    """raftset_sidecar_outcomes_total{step="clean"} of one sidecar, by outcome."""
    return {dict(labels)["outcome"]: value for (name, labels), value in lab.pod(ordinal).metrics().items()
            if name == "raftset_sidecar_outcomes_total" and dict(labels).get("step") == "clean"}


def clean_removals(lab: Lab, ordinal: int) -> float:
    """MemberRemove calls clean sent from this sidecar, whatever etcd answered."""
    return sum(value for (name, labels), value in lab.pod(ordinal).metrics().items()
               if name == "raftset_sidecar_membership_changes_total" and dict(labels).get("operation") == "clean_remove")


@pytest.mark.lifecycle
async def test_clean_removes_a_vanished_undesired_member_after_the_grace(make_lab) -> None:
    lab = make_lab(replicas=3, clean_grace=3.0)
    await grow(lab, 3)
    writer = writing(lab, 0, 1)
    lab.scale(2)
    lab.pod(2).kill()  # gone without a leave: node lost, pod force-deleted
    members = await lab.wait_voting(2, 30, 0, 1)
    assert sorted(m.name for m in members) == ["demo-0", "demo-1"]
    await lab.logged("clean: removed member", 0, 1)  # only the leader cleans
    written = writer.ok
    wait_for(lambda: writer.ok > written + 20, 20, "writes acknowledged by the two that stay")
    writer.stop()
    assert writer.failed == 0, writer.errors[:5]
    await check_members(lab, writer, 0, 1)


async def vanished_member_removed(lab: Lab, writer: Writer, *cleaners: int) -> None:
    """Once ordinals 0 and 1 answer again: ordinal 2's member is cleaned (by one of `cleaners`), writes
    are acknowledged by the two that stay, and every acknowledged write reads back (the writer stopped)."""
    members = await lab.wait_voting(2, 60, 0, 1)
    assert sorted(m.name for m in members) == ["demo-0", "demo-1"]
    await lab.logged("clean: removed member", *cleaners)
    written = writer.ok
    wait_for(lambda: writer.ok > written + 20, 20, "writes acknowledged by the two that stay")
    writer.stop()
    await check_members(lab, writer, 0, 1)


async def test_clean_removes_nothing_while_two_of_three_members_are_down(make_lab) -> None:
    """No quorum, no leader: clean's rounds run and remove nothing; once ordinal 1 is back, the vanished
    ordinal 2 goes."""
    lab = make_lab(replicas=3, clean_grace=2.0)
    await grow(lab, 3)
    await lab.move_leader_to(0)
    writer = writing(lab, 0, 1)
    lab.scale(2)
    lab.pod(1).kill()
    lab.pod(2).kill()
    await asyncio.sleep(4)  # two grace periods
    await lab.rounds_pass("clean", [0])  # and clean decided on them since
    members = await lab.members(0, linearizable=False)  # no quorum: its own view
    assert len(members) == 3
    assert "clean: removed member" not in lab.pod(0).sidecar_log.read_text()
    assert clean_removals(lab, 0) == 0
    assert lab.pod(0).heartbeat()["role"] in ("unknown", "follower")
    assert not lab.pod(0).ready()
    lab.pod(1).start()
    lab.pod(1).wait_ready()
    await vanished_member_removed(lab, writer, 0, 1)


async def test_clean_keeps_a_member_etcd_would_let_it_remove_while_too_few_answer(
        make_lab, toxiproxy: Toxiproxy) -> None:
    """The sidecar's own quorum guard, not etcd's: ordinal 2 vanished (undesired, past the grace) while
    ordinal 1's client port does not answer but its Raft traffic flows. etcd would accept and commit
    that MemberRemove (the target is down, 0 and 1 are a Raft quorum: writes commit throughout); the
    leader's clean counts the members that answer it, only itself, and must remove nothing until
    ordinal 1 answers again."""
    lab = make_lab(replicas=3, clean_grace=2.0)
    route_client(lab, toxiproxy, 1)
    await grow(lab, 3)
    await lab.move_leader_to(0)
    writer = writing(lab, 0)
    lab.scale(2)
    toxiproxy.set_enabled(client_proxy_name(1), False)
    lab.pod(2).kill()
    await asyncio.sleep(4)  # two grace periods
    await lab.rounds_pass("clean", [0])  # and the leader's clean decided on them since
    written = writer.ok
    wait_for(lambda: writer.ok > written + 20, 20, "writes committing: 0 and 1 are a Raft quorum")
    assert (await lab.status(0)).is_leader
    assert len(await lab.members(0)) == 3, "clean removed a member while only 1 of 3 answered it"
    assert clean_removals(lab, 0) == 0, "clean sent a MemberRemove while only 1 of 3 answered it"
    assert clean_outcomes(lab, 0).get("none", 0) > 0
    toxiproxy.set_enabled(client_proxy_name(1), True)
    await vanished_member_removed(lab, writer, 0)
    assert writer.failed == 0, writer.errors[:5]


async def test_clean_removes_a_never_started_learner_of_a_kept_ordinal_after_the_grace(make_lab) -> None:
    """Fault h: ordinal 2 is kept, its learner entry was added but its store never started."""
    lab = make_lab(replicas=3, clean_grace=3.0)
    await grow(lab, 2)
    writer = writing(lab, 0, 1)
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
    writer.stop()
    await check_members(lab, writer, 0, 1, 2)
