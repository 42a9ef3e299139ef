"""Joining with real etcd: growth member by member, concurrent joiners, refill of a stale PVC."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from tests.harness.engines import EngineUnderTest
from tests.harness.lab import wait_for
from tests.harness.scenarios import check_members, grow, start_together, writing

pytestmark = pytest.mark.etcd


# Membership-clean removes a learner of a kept ordinal that has not shown itself started for the grace
# (3 s in the lab). An Xline learner took longer than that to show started here, so the clean loop
# removed it again and again (both growth tests, in 1 of 2 runs): tests that add learners give them time.
JOINING_GRACE = 30.0
LOG_AFTER_RPC_S = 0.5  # a sidecar logs an RPC's outcome after its reply, a little after it took effect


def initial_size(engine_under_test: EngineUnderTest) -> int:
    """The smallest new cluster that grows by MemberAdd: one member where the engine bootstraps alone;
    two on Xline, whose member that bootstrapped alone never serves a third (Capabilities.bootstrap_alone)."""
    return 1 if engine_under_test.engine.capabilities.bootstrap_alone else 2


@pytest.mark.lifecycle
async def test_new_cluster_grows_one_member_at_a_time(make_lab, engine_under_test: EngineUnderTest) -> None:
    initial = initial_size(engine_under_test)
    lab = make_lab(replicas=initial, clean_grace=JOINING_GRACE)
    await grow(lab, initial)
    first = lab.pod(0)
    members = await lab.wait_voting(initial)
    if initial == 1:
        assert first.heartbeat()["role"] == "leader"
    assert first.marker()["member_id"] == next(f"{m.id:x}" for m in members if m.name == "demo-0")
    await lab.put("/grow/before", "1")
    for size in range(initial + 1, 4):
        lab.scale(size)
        pod = lab.pod(size - 1)
        pod.start()
        pod.wait_ready()
        members = await lab.wait_voting(size)
        await lab.logged("promoted member", size - 1)
        assert "join: add-learner" in pod.log_text()
    def roles() -> list[str]:
        return sorted(lab.pod(o).heartbeat()["role"] for o in range(3))
    wait_for(lambda: roles() == ["follower", "follower", "leader"], 10, "one leader and two followers in the heartbeats")
    assert {m.name for m in members} == {"demo-0", "demo-1", "demo-2"}
    for ordinal in range(3):
        assert await lab.get("/grow/before", ordinal) == b"1"
        assert lab.pod(ordinal).marker()["member_id"] == lab.pod(ordinal).heartbeat()["member_id"]


async def test_three_grow_to_five(make_lab) -> None:
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    lab.scale(5)
    for ordinal in (3, 4):
        lab.pod(ordinal).start()
        lab.pod(ordinal).wait_ready()
    members = await lab.wait_voting(5)
    assert sorted(m.name for m in members) == [f"demo-{o}" for o in range(5)]


@pytest.mark.lifecycle
async def test_two_members_joining_at_the_same_moment_both_end_up_voting(
        make_lab, engine_under_test: EngineUnderTest) -> None:
    initial = initial_size(engine_under_test)
    lab = make_lab(replicas=initial, clean_grace=JOINING_GRACE)
    await grow(lab, initial)
    lab.scale(initial + 2)
    joiners = [lab.pod(initial), lab.pod(initial + 1)]
    await start_together(lab, (initial, initial + 1))
    members = await lab.wait_voting(initial + 2)
    assert {m.name for m in members} == {f"demo-{o}" for o in range(initial + 2)}
    # One membership change at a time (the sidecar's own check: Xline would accept a second
    # learner): whichever was added second was added only after the first was promoted.
    first, second = sorted((_logged_at(p, "added member"), _logged_at(p, "promoted member")) for p in joiners)
    assert second[0] >= first[1], f"the second learner was added before the first was promoted: {first}, {second}"


def _logged_at(pod, text: str) -> datetime:
    """When the pod's sidecar first logged `text` (its log lines start with a local timestamp)."""
    line = next(line for line in pod.sidecar_log.read_text().splitlines() if text in line)
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")


@pytest.mark.lifecycle
async def test_stale_data_dir_on_refill_is_moved_aside_and_joins_fresh(make_lab) -> None:
    lab = make_lab(replicas=3, clean_grace=JOINING_GRACE)
    await grow(lab, 3)
    writer = writing(lab, 0, 1)
    await lab.put("/stale/key", "v1")
    old_id = lab.pod(2).marker()["member_id"]
    lab.scale(2)
    result = lab.pod(2).terminate()
    assert result is not None and result["removed"], result
    await lab.wait_voting(2, 30, 0, 1)
    await lab.put("/stale/key", "v2", 0)
    # The PVC stays (builtin StatefulSet retains it): the refilled ordinal finds old data.
    assert any(lab.pod(2).data_dir.iterdir())
    lab.scale(3)
    lab.pod(2).start()
    lab.pod(2).wait_ready()
    members = await lab.wait_voting(3)
    new_id = lab.pod(2).marker()["member_id"]
    assert new_id != old_id and new_id in {f"{m.id:x}" for m in members}
    # Kept aside until the new member votes, then released (docs/operations.md, "Replacing a member").
    log = lab.pod(2).sidecar_log.read_text()
    assert "moved aside" in log
    wait_for(lambda: "released the data moved aside" in lab.pod(2).sidecar_log.read_text(), 10,
             "the stale copy released once the new member votes")
    assert not [p for p in Path(lab.pod(2).data_dir.parent).iterdir() if ".aside-" in p.name]
    assert await lab.get("/stale/key", 2) == b"v2"
    writer.stop()
    await check_members(lab, writer, 0, 1, 2)


@pytest.mark.lifecycle
async def test_a_member_added_by_member_add_restarts_and_the_cluster_still_grows(
        make_lab, engine_under_test: EngineUnderTest) -> None:
    """Restart is not leave, for a member that joined by MemberAdd too. Xline may list such a member
    without name or client URLs after its restart (docs/engines.md, "Names lost on Xline"): the
    sidecars must still count it as the started voter it is, or the next joiner waits for good."""
    initial = initial_size(engine_under_test)
    lab = make_lab(replicas=initial, clean_grace=JOINING_GRACE)
    await grow(lab, initial)
    lab.scale(initial + 1)
    joined = lab.pod(initial)
    joined.start()
    joined.wait_ready()
    await lab.wait_voting(initial + 1)
    member_id = joined.heartbeat()["member_id"]
    result = joined.terminate()  # replicas stay: a restart
    assert result is not None and not result["removed"], result
    joined.start()
    joined.wait_ready()
    assert joined.heartbeat()["member_id"] == member_id
    members = await lab.wait_voting(initial + 1)
    assert {m.name for m in members} == {f"demo-{o}" for o in range(initial + 1)}
    lab.scale(initial + 2)
    grown = lab.pod(initial + 1)
    grown.start()
    grown.wait_ready()
    await lab.wait_voting(initial + 2)
    assert "join: add-learner" in grown.log_text()


@pytest.mark.lifecycle
async def test_restart_keeps_member_id_and_data(make_lab, engine_under_test: EngineUnderTest) -> None:
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    hand_off = engine_under_test.engine.capabilities.hand_off
    if hand_off:
        await lab.move_leader_to(1)
    await lab.put("/restart/key", "kept")
    pod = lab.pod(1)
    member_id = pod.heartbeat()["member_id"]
    leading = (await lab.status(1)).is_leader
    result = pod.terminate()  # replicas stay 3: a restart (rolling update, drain, eviction)
    assert result is not None and not result["removed"] and result["action"] == "kept", result
    # A leader hands leadership off first, where the engine's MoveLeader is safe.
    assert (result["moved_leader_to"] is not None) == (leading and hand_off), result
    members = await lab.members(0, 2)
    assert len(members) == 3 and f"{members[1].id:x}" in {f"{m.id:x}" for m in members}
    assert member_id in {f"{m.id:x}" for m in members}
    pod.start()
    pod.wait_ready()
    await lab.wait_voting(3)
    assert pod.heartbeat()["member_id"] == member_id
    assert "join: rejoin" in pod.sidecar_log.read_text()
    assert await lab.get("/restart/key", 1) == b"kept"


async def test_sidecar_killed_right_after_member_add_is_reused_on_restart(make_lab) -> None:
    # A grace the restart stays well inside even on a busy runner: the lab's 3 s let the other
    # sidecars clean the entry 3.2 s after the add, while the sidecar was still coming back.
    lab = make_lab(replicas=3, clean_grace=60.0)
    await grow(lab, 3)
    writer = writing(lab, 0, 1, 2)
    before = {m.id for m in await lab.members(0)}
    lab.scale(4)
    pod = lab.pod(3)
    lab.create_pod(3)
    pod.start_sidecar()
    pod.wait_startup()
    pod.kill()  # SIGKILL before the store ever started
    members = await lab.members(0)
    pending = [m for m in members if not m.started]
    assert len(pending) == 1 and pending[0].is_learner and pending[0].id not in before
    pod.start_sidecar()
    pod.wait_startup()
    pod.start_store()
    pod.wait_ready()
    members = await lab.wait_voting(4)
    assert {m.id for m in members} == before | {pending[0].id}, "the entry reused: no second member added"
    assert "join: reuse-entry" in pod.sidecar_log.read_text()
    writer.stop()
    await check_members(lab, writer, 0, 1, 2, 3)


async def test_sidecar_killed_right_after_member_add_is_cleaned_after_the_grace(make_lab) -> None:
    lab = make_lab(replicas=3, clean_grace=4.0)
    await grow(lab, 3)
    writer = writing(lab, 0, 1, 2)
    before = {m.id for m in await lab.members(0)}
    lab.scale(4)
    pod = lab.pod(3)
    lab.create_pod(3)
    pod.start_sidecar()
    pod.wait_startup()
    pod.kill()
    members = await lab.members(0)
    assert len(members) == 4
    (added,) = [m for m in members if m.id not in before]  # a learner without a name until it starts
    lab.scale(3)  # the operator gives up on ordinal 3
    await lab.wait_voting(3, 60, 0, 1, 2)
    leader = await lab.leader_ordinal(0, 1, 2)
    assert leader is not None
    await lab.logged(f"clean: removed member {added.hex_id}", leader)
    # After the grace, from the MemberAdd (the earliest clean could see the member absent; its line is
    # logged just after the RPC) to the removal's own line: a slow machine only makes it later.
    added_at = _logged_at(pod, f"added member {added.hex_id}")
    removed_at = _logged_at(lab.pod(leader), f"clean: removed member {added.hex_id}")
    assert (removed_at - added_at).total_seconds() >= lab.clean_grace - LOG_AFTER_RPC_S, (added_at, removed_at)
    wait_for(lambda: lab.pod(0).ready(), 10, "demo-0 still ready")
    writer.stop()
    await check_members(lab, writer, 0, 1, 2)


@pytest.mark.per_engine
async def test_an_initial_pod_that_starts_after_the_others_formed_the_cluster_joins_without_a_removal(
        make_lab, engine_under_test: EngineUnderTest) -> None:
    """On Xline the third initial member is listed by name, without client URLs, until it runs: it
    starts as that entry. Removing and re-adding it would make every member added later panic while
    replaying the removal (docs/engines.md), so the fourth is checked too."""
    lab = make_lab(replicas=3, clean_grace=JOINING_GRACE)
    if engine_under_test.engine.capabilities.bootstrap_alone:
        await grow(lab, 2)
    else:
        await start_together(lab, (0, 1))  # two of the three initial members: a quorum
    writer = writing(lab, 0, 1)
    late = lab.pod(2)
    if not engine_under_test.engine.capabilities.bootstrap_alone:
        [entry] = [m for m in await lab.members(0, linearizable=False) if m.peer_urls == (lab.naming.peer_url(2),)]
        assert (entry.name, entry.client_urls) == ("demo-2", ()), entry
    late.start()
    late.wait_ready(60)
    await lab.wait_voting(3)
    lab.scale(4)
    lab.pod(3).start()
    lab.pod(3).wait_ready(60)
    await lab.wait_voting(4)
    written = writer.ok
    wait_for(lambda: writer.ok > written + 50, 30, "writes after the fourth joined")
    writer.stop()
    logs = "".join(lab.pod(o).log_text() for o in range(4))
    assert "remove-entry" not in logs and "removed our old member entry" not in logs
    for ordinal in range(4):
        assert "panicked" not in lab.pod(ordinal).store_log_text(), lab.pod(ordinal).store_log_tail(20)
    await check_members(lab, writer, 0, 1, 2, 3)
