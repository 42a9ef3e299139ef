"""Issue 11: a member that left Raft but kept its Lease, through the whole stack.

The reverse of tests/e2e/test_membership.py's refused leave (a member in Raft with no pod): here
the pod keeps running and its sidecar keeps renewing its heartbeat Lease, while its member is
removed behind its back with a raw MemberRemove. Raft is the truth: the status lists the pod's
member as not in Raft, names the disagreement and, in Progressing, the pod and member; Available
does not count it as a voter (never "3 of 3"; nor does the scale-in quorum guard:
tests/unit/test_planner.py). What the product does next is the join decided again (fault c):
etcd's removed member exits, its sidecar moves the data aside and joins as a new member, and the
cluster settles at three voters with every acknowledged write.

Real parts throughout: kube-apiserver, controllers, the operator, the sidecars and etcd members
run by the pod runner.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raftset.etcdclient import EtcdClientError, MemberClient, Refusal
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


@pytest.mark.parametrize("backend", ["StatefulSet"])
def test_a_member_that_left_raft_but_kept_its_lease_is_named_not_counted_and_rejoins(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, backend: str,
        etcd: EngineUnderTest) -> None:
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(3, workloadKind=backend, version=etcd.version, storage={"size": "1Gi"}, **FAST)
    kv.wait_healthy(0, 1, 2)
    kv.move_leader(0, 0, 1, 2)
    old = {m.name: m.id for m in kv.members(0, 1, 2)}[VICTIM]
    writer = Writer([kv.url(0), kv.url(1)])
    writer.start()
    try:
        wait_for(lambda: writer.ok > 50, 60, "the writer running")
        remove_behind_its_back(kv, old)

        def left_raft() -> dict[str, Any] | None:
            st = kv.status()
            row = next((m for m in st.get("members") or [] if m["name"] == VICTIM), {})
            return st if row.get("id") == f"{old:x}" and row.get("inRaft") is False else None
        # One status, read while the disagreement lasts (until the rejoined member's heartbeat).
        st = wait_for(left_raft, 60, f"{VICTIM}'s row with its old member, not in Raft", interval=0.1)
        conditions = {c["type"]: c for c in st["conditions"]}
        print(f"while {VICTIM}'s member is out of Raft: members {st['members']}; disagreements "
              f"{st['disagreements']}; conditions {[(c['type'], c['reason'], c['message']) for c in st['conditions']]}")
        assert f"{VICTIM} reports member {old:x}, which Raft does not list" in st["disagreements"], st
        assert not conditions["Available"]["message"].startswith("3 of 3"), conditions["Available"]
        progressing = conditions["Progressing"]
        assert progressing["status"] == "True" and f"{VICTIM} (member {old:x})" in progressing["message"], progressing
        assert "Raft does not list" in progressing["message"], progressing

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
