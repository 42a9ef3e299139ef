"""The leader's periodic hash check with real etcd and real sidecars, no alarm anywhere: a follower
whose data differs from the majority's is replaced by a new member while writes keep flowing
(spec.repair.policy Automatic), or reported Needed until a person asks for the replacement (Manual).

etcd's own corruption checks stay off (no `corrupt-check-time`, no initial check), so no CORRUPT alarm
refuses writes: the sidecar finds the difference by comparing every voter's HashKV at one revision
(RAFTSET_HASH_CHECK_INTERVAL, one second here) and the member is replaced under the membership lock.
Ends with the acknowledged-write checker (every acknowledged write reads back, HashKV agrees).
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from raftset import contract
from raftset.contract import ReplacePhase, SidecarEnv
from raftset.replace import parse_progress
from tests.harness import faults
from tests.harness.engines import EngineUnderTest
from tests.harness.lab import Lab, Pod
from tests.harness.rot import (GOOD, ROTTEN, alarms, annotations, cleared, events, follower_holding_good, holds,
                               ids_by_name, kubelet_restarts, replaced, rot, writing)
from tests.harness.scenarios import check_members, grow
from tests.harness.waiting import await_for, wait_for

pytestmark = pytest.mark.etcd


def hash_check_env(under_test: EngineUnderTest, policy: str = "Automatic") -> dict[str, str]:
    options = json.loads(under_test.options_json)
    assert not any("corrupt" in flag for flag in options), options
    return {SidecarEnv.OPTIONS: json.dumps(options), SidecarEnv.MAINTENANCE_INTERVAL: "0.5",
            SidecarEnv.HASH_CHECK_INTERVAL: "1", SidecarEnv.REPAIR_POLICY: policy}


def hash_checks(lab: Lab, outcome: str) -> float:
    """The hash checks counted under `outcome` by every sidecar (the leader's counts; a leader change moves it)."""
    key = ("raftset_sidecar_outcomes_total", (("outcome", outcome), ("step", "hash_check")))
    return sum(lab.pod(o).metrics()[key] for o in range(3))


def agreed_at(lab: Lab) -> list[int]:
    """The revisions at which the sidecars' hash checks found every voter agreeing (their logs)."""
    return [int(r) for o in range(3) for r in re.findall(r"every voter's data agrees at revision (\d+)",
                                                          lab.pod(o).log_text())]


def judged(pod: Pod) -> list[dict[str, str]]:
    """The labels of the pod's raftset_member_judged_corrupt series (one while a verdict on its member stands)."""
    return [dict(labels) for name, labels in pod.metrics() if name == "raftset_member_judged_corrupt"]


async def test_a_follower_whose_hash_differs_is_replaced_with_writes_flowing(make_lab, engine_under_test) -> None:
    lab = make_lab(replicas=3, env_extra=hash_check_env(engine_under_test))
    ids, writer = await follower_holding_good(lab)
    old = ids["demo-2"]
    pod = lab.pod(2)
    async with kubelet_restarts(pod):
        rot(pod)  # the hash check may replace it before a read sees the rotten value: its Event says it did
        new = await await_for(replaced(lab, pod, old, 0, 1), 120, "demo-2 voting as a new member")
        await await_for(cleared(lab, 2), 30, "the replacement record and the verdict cleared")
        await await_for(lambda: asyncio.to_thread(pod.ready), 40, "demo-2 ready")
    written = writer.ok
    wait_for(lambda: writer.ok > written + 20, 20, "writes flowing after the replacement")
    writer.stop()
    print(f"writer ok={writer.ok} failed={writer.failed}; longest stall {writer.longest_stall:.2f}s")
    assert writer.failed == 0, "no alarm refused a write, the replacement lost none"
    assert new != old
    assert not await alarms(lab), "the sidecar raises no alarm"
    assert await lab.get("/rot", 2) == GOOD.encode(), "the new member holds the good copy"
    reasons = [(e.reason, e.message) for e in events(lab)]
    corrupt = [m for r, m in reasons if r == "MemberCorrupt"]
    assert corrupt and all("hash check (no alarm)" in m and "demo-2" in m for m in corrupt), reasons
    assert "disagrees with the majority" in corrupt[0] and "spec.repair.policy Automatic" in corrupt[0], reasons
    assert not any(r == "AlarmDisarmed" for r, _ in reasons), reasons
    # A check while demo-2's store was restarting finds its hash unreadable: no finding, never a doubt.
    assert not any(r == "CorruptUnconfirmed" for r, _ in reasons), reasons
    log = pod.log_text()
    assert "moved aside" in log and "removing it without the lock" not in log
    assert "hash check: the hash check (no alarm) finds that the data of member demo-2" in lab.pod(0).log_text()
    # The leader's sidecar counted the finding, and counts agreement again since; the verdict went with the member.
    assert hash_checks(lab, "differs") >= 1 and hash_checks(lab, "unconfirmed") == 0
    agreed = hash_checks(lab, "agree")
    wait_for(lambda: hash_checks(lab, "agree") > agreed, 20, "a hash check agreeing after the replacement")
    assert judged(pod) == []
    await check_members(lab, writer, 0, 1, 2)


async def test_under_manual_policy_a_difference_is_needed_until_a_person_asks(make_lab, engine_under_test) -> None:
    lab = make_lab(replicas=3, env_extra=hash_check_env(engine_under_test, "Manual"))
    before, writer = await follower_holding_good(lab)
    pod = lab.pod(2)
    async with kubelet_restarts(pod):
        rot(pod)
        await await_for(holds(lab, 2, ROTTEN), 20, "demo-2 serving the rotten value")

        def needed() -> str | None:
            record = parse_progress(annotations(lab, 2).get(contract.ANNOTATION_REPLACE_PROGRESS))
            found = record is not None and record.phase == ReplacePhase.NEEDED and "hash check" in record.reason
            return record.reason if found else None

        reason = wait_for(needed, 30, "demo-2 reported as Needed")
        assert "spec.repair.policy is Manual" in reason and contract.ANNOTATION_REPLACE in reason, reason
        # demo-2's own sidecar reports the verdict that stands on it (what RaftsetCorruptMemberNotReplaced watches).
        assert judged(pod) == [{"source": "hash_check", "verdict": "replace"}]
        assert [judged(lab.pod(o)) for o in (0, 1)] == [[], []]
        await asyncio.sleep(4)  # four more checks: nothing is removed, one Event said it
        leader = await lab.leader_ordinal(0, 1, 2)
        assert leader is not None
        await lab.rounds_pass("maintenance", [leader])  # the checks ran since,
        await lab.rounds_pass("repair", [2])  # and demo-2's own repair decided on the verdict
        assert await ids_by_name(lab) == before
        assert await lab.get("/rot", 2) == ROTTEN.encode()
        corrupt = [e.message for e in events(lab) if e.reason == "MemberCorrupt"]
        assert len(corrupt) == 1 and "spec.repair.policy is Manual" in corrupt[0], corrupt
        lab.annotate_pod(2, {contract.ANNOTATION_REPLACE: "true"})  # a person looked and decides
        new = await await_for(replaced(lab, pod, before["demo-2"]), 120, "demo-2 voting as a new member")
        await await_for(cleared(lab, 2), 30, "the replacement record and the verdict cleared")
        await await_for(lambda: asyncio.to_thread(pod.ready), 40, "demo-2 ready")
    wait_for(lambda: judged(pod) == [], 20, "demo-2's judged_corrupt series gone with its old member")
    assert hash_checks(lab, "differs") >= 4, "every check while demo-2 differed counted it"
    written = writer.ok
    wait_for(lambda: writer.ok > written + 20, 20, "writes flowing after the replacement")
    writer.stop()
    print(f"writer ok={writer.ok} failed={writer.failed}; longest stall {writer.longest_stall:.2f}s")
    assert writer.failed == 0 and not await alarms(lab)
    assert new != before["demo-2"] and await lab.get("/rot", 2) == GOOD.encode()
    assert contract.ANNOTATION_REPLACE not in annotations(lab, 2)
    await check_members(lab, writer, 0, 1, 2)


@pytest.mark.per_engine
async def test_a_healthy_cluster_agrees_at_every_check_while_writes_flow_and_a_follower_lags(
        make_lab, engine_under_test) -> None:
    """The check compares at the highest revision every voter has applied (each one's own, read
    serializably), so a follower that lags, here one paused past the election timeout, is compared
    where it stands: never a finding, never a replacement. On Xline too, whose linearizable reads
    answer with the leader's revision (docs/engines.md)."""
    lab = make_lab(replicas=3, env_extra=hash_check_env(engine_under_test))
    await grow(lab, 3)
    before = await ids_by_name(lab)
    writer = await writing(lab, 0, 1, 2)
    # demo-0's own applied revision, past the writer's first writes: the check compares each voter where
    # it has applied. A linearizable read through an Xline member here once timed out (5 s) with the
    # writer's puts flowing through the same member (rehearsal ci37); that read is not what this test checks.
    written = await lab.revision(0, serializable=True)
    # Compared where the writes are, not at revision 1 before them: agreement there proves nothing.
    wait_for(lambda: max(agreed_at(lab), default=0) >= written, 60, f"a hash check agreeing at revision {written} or later")
    leader = await lab.leader_ordinal(0, 1, 2)
    assert leader is not None
    follower = (leader + 1) % 3
    with faults.store_paused(lab, follower, at_least=3.0):
        agreed = hash_checks(lab, "agree")
        wait_for(lambda: hash_checks(lab, "agree") + hash_checks(lab, "not_compared") > agreed, 30,
                 "a hash check while a follower is paused")
    agreed = hash_checks(lab, "agree")
    wait_for(lambda: hash_checks(lab, "agree") >= agreed + 3, 60, "three more agreeing after it resumed")
    writer.stop()
    print(f"hash checks: agree {hash_checks(lab, 'agree')}, not compared {hash_checks(lab, 'not_compared')}; "
          f"writer ok={writer.ok} failed={writer.failed}")
    assert hash_checks(lab, "differs") == 0 and hash_checks(lab, "unconfirmed") == 0
    assert not [e for e in events(lab) if e.reason in ("MemberCorrupt", "CorruptUnconfirmed")]
    assert await ids_by_name(lab) == before, "nobody replaced"
    await check_members(lab, writer, 0, 1, 2)
