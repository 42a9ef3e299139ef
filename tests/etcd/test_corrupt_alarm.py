"""A CORRUPT alarm with real etcd and real sidecars: rotten data is handed to member replacement and
the alarm disarmed once the member has left Raft; an alarm the data does not confirm replaces nothing.

The corruption is real (tests.harness.rot: a value's bytes changed in a stopped follower's bbolt file)
and etcd's own periodic corruption check (`corrupt-check-time`) raises the alarm. Both tests end with the acknowledged-write
checker (every acknowledged write reads back, HashKV agrees on every member).
"""

from __future__ import annotations

import asyncio
import json

import grpc.aio
import pytest
from etcd3aio._protobuf import AlarmRequest, MaintenanceStub

from raftset import contract
from raftset.contract import ReplacePhase, SidecarEnv
from raftset.sidecar.io.etcdclient import Alarm, AlarmKind, MemberClient, grpc_target
from raftset.replace import parse_progress
from tests.harness.engines import EngineUnderTest
from tests.harness.lab import Lab
from tests.harness.rot import (GOOD, ROTTEN, alarms, annotations, cleared, events, follower_holding_good, holds,
                               ids_by_name, kubelet_restarts, replaced, rot, writing)
from tests.harness.scenarios import check_members, grow
from tests.harness.waiting import await_for, wait_for

pytestmark = pytest.mark.etcd


def corrupt_env(under_test: EngineUnderTest, check: bool = True) -> dict[str, str]:
    """etcd's periodic corruption check every second (etcd >= 3.6's name; the config file wants
    nanoseconds), the leader's maintenance round every half second, and spec.repair.policy Automatic."""
    options = {**json.loads(under_test.options_json), **({"corrupt-check-time": str(1_000_000_000)} if check else {})}
    return {SidecarEnv.OPTIONS: json.dumps(options), SidecarEnv.MAINTENANCE_INTERVAL: "0.5",
            SidecarEnv.REPAIR_POLICY: "Automatic"}


async def test_rotten_data_on_a_follower_is_replaced_and_its_alarm_disarmed(make_lab, engine_under_test) -> None:
    lab = make_lab(replicas=3, env_extra=corrupt_env(engine_under_test))
    ids, writer = await follower_holding_good(lab)
    old = ids["demo-2"]
    pod = lab.pod(2)
    rot(pod)
    await await_for(holds(lab, 2, ROTTEN), 20, "demo-2 serving the rotten value")

    async with kubelet_restarts(pod):
        new = await await_for(replaced(lab, pod, old, 0, 1), 120, "demo-2 voting as a new member")

        async def disarmed() -> bool:
            return not await alarms(lab)

        await await_for(disarmed, 30, "the CORRUPT alarm disarmed")
        await await_for(cleared(lab, 2), 30, "the replacement record and the verdict cleared")
        await await_for(lambda: asyncio.to_thread(pod.ready), 40, "demo-2 ready")
    written = writer.ok
    wait_for(lambda: writer.ok > written + 20, 20, "writes flowing after the replacement")
    writer.stop()
    print(f"writer ok={writer.ok} failed={writer.failed} (writes are refused while the alarm stands); "
          f"longest stall {writer.longest_stall:.2f}s")
    assert new != old
    assert await lab.get("/rot", 2) == GOOD.encode(), "the new member holds the good copy"
    reasons = [(e.reason, e.message) for e in events(lab)]
    corrupt = [m for r, m in reasons if r == "MemberCorrupt"]
    assert corrupt and "demo-2" in corrupt[0] and "disagrees with the majority" in corrupt[0], reasons
    assert any(r == "AlarmDisarmed" and f"{old:x}" in m for r, m in reasons), reasons
    # A round while demo-2's store was restarting may have found its hash unreadable; no other doubt.
    assert all("could not be read" in m for r, m in reasons if r == "CorruptUnconfirmed"), reasons
    log = pod.log_text()
    assert "removing it without the lock" in log and "moved aside" in log
    await check_members(lab, writer, 0, 1, 2)


async def activate_corrupt(lab: Lab, member_id: int, via: int = 0) -> None:
    """What etcd's corruption check does, by hand: Maintenance.Alarm ACTIVATE CORRUPT for the member."""
    assert lab.client_tls() is None
    async with grpc.aio.insecure_channel(grpc_target(lab.pod(via).client_url)) as channel:
        await MaintenanceStub(channel).Alarm(AlarmRequest(action=AlarmRequest.ACTIVATE, memberID=member_id,
                                                          alarm=AlarmKind.CORRUPT.value), timeout=5)


async def test_an_alarm_the_data_does_not_confirm_replaces_nothing(make_lab, engine_under_test) -> None:
    # Even under spec.repair.policy Automatic: every member's hash agrees, so a person decides.
    lab = make_lab(replicas=3, env_extra=corrupt_env(engine_under_test))
    await grow(lab, 3)
    await lab.move_leader_to(0)
    before = await ids_by_name(lab)
    writer = await writing(lab, 0, 1, 2)
    await activate_corrupt(lab, before["demo-1"])

    def needed() -> str | None:
        # A first round may still find a hash unreadable (a channel reconnecting): doubtful too, and
        # reported so until the next round reads every hash.
        record = parse_progress(annotations(lab, 1).get(contract.ANNOTATION_REPLACE_PROGRESS))
        found = record is not None and record.phase == ReplacePhase.NEEDED and "agrees" in record.reason
        return record.reason if found else None

    reason = wait_for(needed, 30, "demo-1 reported as Needed: its data agrees with everybody's")
    assert "a person decides" in reason, reason
    wait_for(lambda: any(e.reason == "CorruptUnconfirmed" and "demo-1" in e.message for e in events(lab)), 10,
             "the CorruptUnconfirmed Event")
    await asyncio.sleep(5)  # ten maintenance rounds: nothing more happens
    await lab.rounds_pass("maintenance", [0])  # the leader judged the alarm again since,
    await lab.rounds_pass("repair", [1])  # and demo-1's own repair decided on the report
    assert await ids_by_name(lab) == before
    assert parse_progress(annotations(lab, 1).get(contract.ANNOTATION_REPLACE_PROGRESS)).phase == ReplacePhase.NEEDED
    assert not any(e.reason in ("MemberCorrupt", "AlarmDisarmed") for e in events(lab))
    # A person looked and disarms: the report goes away by itself.
    async with MemberClient(lab.pod(0).client_url, lab.client_tls()) as client:
        await client.disarm(Alarm(before["demo-1"], AlarmKind.CORRUPT))
    await await_for(cleared(lab, 1), 30, "the report cleared")
    written = writer.ok
    wait_for(lambda: writer.ok > written + 20, 20, "writes flowing after the disarm")
    writer.stop()
    print(f"writer ok={writer.ok} failed={writer.failed} (refused while the alarm stood)")
    assert await ids_by_name(lab) == before
    await check_members(lab, writer, 0, 1, 2)


async def test_a_rotten_leader_hands_off_then_is_replaced(make_lab, engine_under_test) -> None:
    # etcd's periodic check runs on the leader and, when the leader's own data is the rotten copy,
    # accuses a follower instead (a doubtful case). The alarm a correct check would raise is raised
    # here by hand, on a leader whose data really is rotten.
    lab = make_lab(replicas=3, env_extra=corrupt_env(engine_under_test, check=False))
    await grow(lab, 3)
    await lab.put("/rot", GOOD, 0)
    await await_for(holds(lab, 0, GOOD), 10, "the value on demo-0")
    pod = lab.pod(0)
    rot(pod)
    await await_for(holds(lab, 0, ROTTEN), 20, "demo-0 serving the rotten value")
    await lab.move_leader_to(0)
    old = (await ids_by_name(lab))["demo-0"]
    writer = await writing(lab, 1, 2)
    async with kubelet_restarts(pod):
        await activate_corrupt(lab, old, via=1)

        new = await await_for(replaced(lab, pod, old, 1, 2), 120, "demo-0 voting as a new member")

        async def disarmed() -> bool:
            return not await alarms(lab, 1)

        await await_for(disarmed, 30, "the CORRUPT alarm disarmed")
        await await_for(cleared(lab, 0), 30, "the replacement record and the verdict cleared")
        await await_for(lambda: asyncio.to_thread(pod.ready), 40, "demo-0 ready")
    written = writer.ok
    wait_for(lambda: writer.ok > written + 20, 20, "writes flowing after the replacement")
    writer.stop()
    print(f"writer ok={writer.ok} failed={writer.failed}; longest stall {writer.longest_stall:.2f}s")
    assert new != old
    assert await lab.get("/rot", 0) == GOOD.encode(), "the new member holds the good copy"
    log = pod.log_text()
    assert "replace: leadership moved to" in log and "removing it without the lock" in log
    assert log.index("replace: leadership moved to") < log.index("removing it without the lock")
    await check_members(lab, writer, 0, 1, 2)
