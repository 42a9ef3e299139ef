"""Leaving with real etcd: follower and leader scale-in under a writer, quorum guard, SIGTERM fallback."""

from __future__ import annotations

import time

import pytest

from raftset import contract
from tests.harness.checker import Writer
from tests.harness.engines import EngineUnderTest
from tests.harness.lab import wait_for
from tests.harness.scenarios import STALL_BOUND_S, check_members, grow, scale_in_under_writer, writing

pytestmark = pytest.mark.etcd


@pytest.mark.lifecycle
async def test_scale_in_of_a_follower(make_lab, engine_ready: EngineUnderTest) -> None:
    lab = make_lab(replicas=3, env_extra=engine_ready.counting_elections())
    result, writer = await scale_in_under_writer(lab, leader=0)
    assert result["removed"] and result["scaled_away"] and result["moved_leader_to"] is None, result
    assert writer.failed == 0, writer.errors[:5]
    assert result["elections"] == 0
    assert contract.lease_name("demo-2") not in {lease.metadata.name for lease in lab.leases().values()}
    assert sorted(m.name for m in await lab.members(0, 1)) == ["demo-0", "demo-1"]


# Only where the hand-off is safe (Capabilities.hand_off). An Xline leader just exits: measured here
# with the lab's MoveLeader to ordinal 2 first, the two that stay stopped taking writes for more than
# 10 s after its removal in 2 of 3 runs (docs/engines.md, "What is safe on Xline").
@pytest.mark.lifecycle(needs="hand_off")
async def test_scale_in_of_the_leader_hands_off_first(make_lab, engine_ready: EngineUnderTest) -> None:
    lab = make_lab(replicas=3, env_extra=engine_ready.counting_elections())
    result, writer = await scale_in_under_writer(lab, leader=2)
    leader = await lab.leader_ordinal(0, 1)
    assert leader in (0, 1)
    assert result["removed"], result
    assert result["moved_leader_to"] is not None, result
    assert writer.failed == 0, writer.errors[:5]
    assert writer.longest_stall < STALL_BOUND_S, f"writes stalled {writer.longest_stall:.2f}s"
    assert result["elections"] == 1  # the hand-off itself, no election by timeout
    print(f"leader hand-off: {writer.ok} writes, {writer.failed} failed, {len(writer.errors)} retried, "
          f"longest stall {writer.longest_stall * 1000:.0f} ms, {result['elections']} election(s), "
          f"leave took {result['seconds']} s")


@pytest.mark.lifecycle
async def test_a_stale_scale_away_mark_never_removes_a_restarting_member(make_lab) -> None:
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    writer = writing(lab, 0, 2)
    lab.annotate_pod(1, {contract.ANNOTATION_SCALE_AWAY: "true"})  # the workload still keeps ordinal 1
    result = lab.pod(1).terminate()
    assert result is not None and not result["removed"] and "stale mark" in result["reason"], result
    assert sorted(m.name for m in await lab.members(0, 2)) == ["demo-0", "demo-1", "demo-2"]
    lab.pod(1).start()  # the restart it was: back with its data, the same member
    lab.pod(1).wait_ready()
    await lab.wait_voting(3)
    writer.stop()
    await check_members(lab, writer, 0, 1, 2)


async def test_scaled_away_member_stays_when_removal_would_lose_quorum(make_lab) -> None:
    lab = make_lab(replicas=3, clean_grace=300)
    await grow(lab, 3)
    writer = writing(lab, 0, 1)  # its puts fail while quorum is lost
    lab.pod(1).kill()
    lab.scale(2)
    result = lab.pod(2).terminate()
    assert result is not None and not result["removed"] and "quorum" in result["reason"], result
    assert len(await lab.members(0, linearizable=False)) == 3  # no quorum left: its own view
    # kubelet brings ordinal 1 back: 2 of the 3 voters answer again and writes commit.
    lab.pod(1).start()
    lab.pod(1).wait_ready()
    written = writer.ok
    wait_for(lambda: writer.ok > written + 20, 30, "writes acknowledged again")
    writer.stop()
    await check_members(lab, writer, 0, 1)


async def test_sigterm_is_the_fallback_when_prestop_never_ran(make_lab) -> None:
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    writer = Writer([lab.pod(0).client_url, lab.pod(1).client_url])
    writer.start()
    lab.scale(2)
    pod = lab.pod(2)
    lab.delete_pod(2)
    # No preStop: the store stops first, then the sidecar gets SIGTERM and leaves via the others.
    pod.store.terminate()
    pod.store.wait(20)
    pod.sidecar.terminate()
    assert pod.sidecar.wait(40) == 0
    lab.release_pod(2)
    members = await lab.wait_voting(2, 30, 0, 1)
    assert sorted(m.name for m in members) == ["demo-0", "demo-1"]
    assert "SIGTERM" in pod.sidecar_log.read_text()
    writer.stop()
    await check_members(lab, writer, 0, 1)


async def test_a_pod_evicted_before_the_workload_let_its_ordinal_go_loses_its_member_without_the_grace(make_lab) -> None:
    """Found on real nodes with a drain during a scale-in: the operator marked demo-2 scale-away and took
    it out of the PodDisruptionBudget, and an eviction deleted the pod before the workload write. Its
    leave rightly kept the member (the workload still kept ordinal 2: a plan may change its mind). Then
    the workload let ordinal 2 go, and no pod was left to leave: the member stayed a voter that never
    answers until membership-clean's grace (300 s). Now the leader's clean removes it on what it reads
    at that moment: ordinal not kept, no pod, silent for `clean.CONFIRM_S`."""
    lab = make_lab(replicas=3, clean_grace=300)
    await grow(lab, 3)
    writer = writing(lab, 0, 1)
    lab.annotate_pod(2, {contract.ANNOTATION_SCALE_AWAY: "true"})
    result = lab.pod(2).terminate()  # the eviction: preStop, stop, the pod object gone
    assert result is not None and not result["removed"] and "stale mark" in result["reason"], result
    assert len(await lab.members(0)) == 3
    lab.scale(2)
    started = time.monotonic()
    members = await lab.wait_voting(2, 120, 0, 1)
    took = time.monotonic() - started
    assert sorted(m.name for m in members) == ["demo-0", "demo-1"]
    assert took < 90, f"removed after {took:.0f} s: the grace, not the evidence"
    print(f"the member of the evicted demo-2 removed {took:.1f} s after the workload let its ordinal go")
    writer.stop()
    await check_members(lab, writer, 0, 1)
