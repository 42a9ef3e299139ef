"""The leader's sidecar publishes the Raft membership; a new leader takes over; a leave shows."""

from __future__ import annotations

import pytest

from raftset.membership import RaftMembership
from tests.harness.lab import Lab, wait_for
from tests.harness.scenarios import check_members, grow, writing

pytestmark = pytest.mark.etcd


def published(lab: Lab, what: str, predicate) -> RaftMembership:  # type: ignore[no-untyped-def]
    return wait_for(lambda: (m := lab.membership()) is not None and predicate(m) and m, 20, what)


async def test_the_leader_publishes_the_membership_it_sees(make_lab) -> None:
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    await lab.move_leader_to(1)
    members = {f"{m.id:x}": m for m in await lab.members(0)}
    record = published(lab, "demo-1 publishing 3 voters",
                       lambda m: m.leader == "demo-1" and sum(r.voter for r in m.members) == 3)
    assert record.leader_id == f"{(await lab.status(1)).member_id:x}"
    assert {r.id: (r.name, r.ordinal, r.peer_urls) for r in record.members} == {
        i: (m.name, int(m.name.rsplit("-", 1)[1]), m.peer_urls) for i, m in members.items()}
    assert record.index > 0 and record.term >= 2
    assert all(r.raft_index is not None and r.applied_index is not None for r in record.members)

    # Leadership moves: the new leader publishes at once, with a higher term.
    await lab.move_leader_to(2)
    moved = published(lab, "demo-2 publishing", lambda m: m.leader == "demo-2")
    assert moved.term > record.term and moved.index >= record.index


async def test_a_member_that_left_is_gone_from_the_next_record(make_lab) -> None:
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    await lab.move_leader_to(0)
    before = published(lab, "3 voters", lambda m: len(m.members) == 3)
    leaving = before.by_ordinal(2)
    assert leaving is not None
    writer = writing(lab, 0, 1)
    lab.scale(2)
    result = lab.pod(2).terminate()
    assert result is not None and result["removed"], result
    after = published(lab, "the record without ordinal 2", lambda m: m.by_id(leaving.id) is None)
    assert after.index > before.index
    assert sorted(r.ordinal for r in after.members) == [0, 1]
    writer.stop()
    assert writer.failed == 0, writer.errors[:5]
    await check_members(lab, writer, 0, 1)
