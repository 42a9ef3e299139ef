"""Issue 11: a member that left Raft but kept its Lease, through the whole stack.

The reverse of tests/e2e/test_membership.py's refused leave (a member in Raft with no pod): here
the pod keeps running and its sidecar keeps renewing its heartbeat Lease, while its member is
removed behind its back with a raw MemberRemove. Raft is the truth: the status lists the pod's
member as not in Raft, names the disagreement and, in Progressing, the pod and member; Available
does not count it as a voter (never "3 of 3"; nor does the scale-in quorum guard:
tests/unit/test_planner.py). What the product does next is the join decided again (fault c):
etcd's removed member exits, its sidecar moves the data aside and joins as a new member, and the
cluster settles at three voters with every acknowledged write.

The disagreement lasts from the leader's next membership publish to the rejoined member's
heartbeat: two independent 2 s loops, so a test that races them can miss it. The test holds it
instead: kv-2's repair loop (the one that rejoins) hangs through the sidecar's test fault hook
(`PodRunner(faults=...)`) until the test has read the status over several membership publishes.

Real parts throughout: kube-apiserver, controllers, the operator, the sidecars and etcd members
run by the pod runner.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client

from raftset import contract
from raftset.sidecar.io.etcdclient import EtcdClientError, MemberClient, Refusal
from tests.e2e.test_fullstack import FAST, assert_writes_flowed, stack
from tests.harness.checker import Writer, check
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import Operator
from tests.harness.view import ClusterView
from tests.harness.waiting import wait_for
from tools.devcluster.podrunner import PodRunner

pytestmark = pytest.mark.e2e

VICTIM = "kv-2"  # a follower: leadership is moved to ordinal 0 first
REJOIN_TIMEOUT = 180.0
PUBLISHES_HELD = 3  # membership publishes the status is watched over while the rejoin is held


def remove_behind_its_back(kv: ClusterView, member_id: int) -> None:
    """A raw MemberRemove through ordinal 0, as a person with etcdctl would do it. etcd refuses
    ("unhealthy cluster") while a voter connected less than 5 s ago: nothing changed then, so
    asking again is safe; MEMBER_NOT_FOUND means an earlier reply was lost."""
    async def removed() -> bool:
        async with MemberClient(kv.url(0), timeout=5) as c:
            try:
                await c.remove(member_id)
            except EtcdClientError as exc:
                if exc.refusal is Refusal.MEMBER_NOT_FOUND:
                    return True
                if exc.refusal is not Refusal.UNHEALTHY:
                    raise
                return False
        return True
    wait_for(lambda: asyncio.run(removed()), 30, f"MemberRemove of {VICTIM}'s member accepted", interval=1)


def names_it_out_of_raft(status: dict[str, Any], old: int) -> bool:
    """The status lists VICTIM with its old member, not in Raft, and names the disagreement."""
    row = next((m for m in status.get("members") or [] if m["name"] == VICTIM), {})
    return row.get("id") == f"{old:x}" and row.get("inRaft") is False and \
        f"{VICTIM} reports member {old:x}, which Raft does not list" in (status.get("disagreements") or [])


def membership_published(kv: ClusterView) -> datetime:
    """When the leader last wrote the membership Lease (it refreshes it every heartbeat interval)."""
    lease = client.CoordinationV1Api(kv.api).read_namespaced_lease(contract.membership_lease_name(kv.name),
                                                                   kv.namespace)
    return lease.spec.renew_time


def statuses_while_held(kv: ClusterView, publishes: int) -> list[dict[str, Any]]:
    """Every status read, 5 a second, until at least one was read after the leader's `publishes`-th
    membership publish from now: the held window, observed over rounds of the loop that would
    end it if the hold did not (it stops when it sees the publish after that)."""
    start, seen, published = membership_published(kv), [], set()
    deadline = time.monotonic() + 60
    while len(published) < publishes + 1:
        assert time.monotonic() < deadline, f"the leader published its membership only {len(published)} " \
                                            f"times in 60 s: {sorted(published)}"
        seen.append(kv.status())
        renewed = membership_published(kv)
        if renewed > start:
            published.add(renewed)
        time.sleep(0.2)
    return seen


@pytest.mark.parametrize("backend", ["StatefulSet"])
def test_a_member_that_left_raft_but_kept_its_lease_is_named_not_counted_and_rejoins(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, backend: str,
        etcd: EngineUnderTest) -> None:
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(3, workloadKind=backend, version=etcd.version, storage={"size": "1Gi"}, **FAST)
    kv.wait_healthy(0, 1, 2)
    kv.move_leader(0, 0, 1, 2)
    old = {m.name: m.id for m in kv.members(0, 1, 2)}[VICTIM]
    hold = runner.fault_dir(namespace, VICTIM) / "repair.hang"
    writer = Writer([kv.url(0), kv.url(1)])
    writer.start()
    try:
        wait_for(lambda: writer.ok > 50, 60, "the writer running")
        hold.touch()  # the rejoin, which ends the disagreement, waits for the test
        wait_for(hold.with_suffix(".hanging").exists, 30, f"{VICTIM}'s repair loop held")
        remove_behind_its_back(kv, old)

        def left_raft() -> dict[str, Any] | None:
            st = kv.status()
            return st if names_it_out_of_raft(st, old) else None
        # The first status with the disagreement, then every one while the rejoin is held.
        st = wait_for(left_raft, 60, f"{VICTIM}'s row with its old member, not in Raft", interval=0.2)
        held = [st, *statuses_while_held(kv, PUBLISHES_HELD)]
        assert hold.with_suffix(".hanging").exists(), "the hold lasted the whole window"
        hold.unlink()
        conditions = {c["type"]: c for c in st["conditions"]}
        print(f"while {VICTIM}'s member is out of Raft: members {st['members']}; disagreements "
              f"{st['disagreements']}; conditions {[(c['type'], c['reason'], c['message']) for c in st['conditions']]}")
        assert f"{VICTIM} reports member {old:x}, which Raft does not list" in st["disagreements"], st
        progressing = conditions["Progressing"]
        assert progressing["status"] == "True" and f"{VICTIM} (member {old:x})" in progressing["message"], progressing
        assert "Raft does not list" in progressing["message"], progressing
        availability = sorted({c["message"] for h in held for c in h["conditions"] if c["type"] == "Available"})
        print(f"Available over the {len(held)} statuses read while held: {availability}")
        assert not [m for m in availability if m.startswith("3 of 3")], availability
        assert all(names_it_out_of_raft(h, old) for h in held), [
            (h.get("members"), h.get("disagreements")) for h in held if not names_it_out_of_raft(h, old)]

        def rejoined() -> int | None:
            voters = {m.name: m.id for m in kv.members(0, 1) if m.started and not m.is_learner}
            return voters[VICTIM] if len(voters) == 3 and voters.get(VICTIM, old) != old else None
        new = wait_for(rejoined, REJOIN_TIMEOUT, f"{VICTIM} voting again as a new member")
        kv.wait_healthy(0, 1, 2)

        def agreed() -> dict[str, Any] | None:
            st = kv.status()
            found = {c["type"]: c["status"] for c in st["conditions"]}
            ok = not st["disagreements"] and (found["Available"], found["Progressing"], found["Degraded"]) == (
                "True", "False", "False")
            return st if ok else None
        settled = wait_for(agreed, 60, "no disagreement left, Available, settled, not Degraded")
        written = writer.ok
        wait_for(lambda: writer.ok > written + 20, 30, "writes flowing after the rejoin")
    finally:
        writer.stop()
    assert new != old
    assert {(m["name"], m["id"], m["inRaft"]) for m in settled["members"] if m["name"] == VICTIM} == {
        (VICTIM, f"{new:x}", True)}
    assert_writes_flowed(writer, at_least=50)
    asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked))
