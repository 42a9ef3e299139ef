"""Quorum loss needs Raft evidence, never stale Leases alone (issue 30, bug 1).

The live reproduction: the leader's and one follower's sidecars could not write their heartbeat
Leases (an admission policy refused them) while Raft kept committing. The operator read the one
fresh record, reported QuorumLost ("1 of 3 voting members answer"), and under Automatic forced a
new cluster from that follower. Here the sidecars and etcd are real and so is the refusal (a
ValidatingAdmissionPolicy in the real kube-apiserver); the tests play the operator's part with
its own parser and decision (raftset.operator.pure.heartbeats, raftset.operator.pure.quorum_loss), and then
the survivor's part of a recovery the operator should never have started.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest
from kubernetes import client as k8s

from raftset.operator.pure import quorum_loss
from raftset.operator.pure import heartbeats
from raftset.operator.pure.status import merge_conditions
from raftset.quorum_loss import Survivor
from tests.harness.checker import Writer, check
from tests.harness.lab import Lab
from tests.harness.quorum import end_recovery, lease_writes_refused, record_recovery
from tests.harness.scenarios import grow
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.etcd

ROUNDS = 10  # the operator's rounds watched once the two Leases are stale, one per second


def operator_round(lab: Lab, conditions: list[dict], now: datetime) -> quorum_loss.QuorumDecision:
    """One reconcile's quorum-loss decision over what the API holds now, Automatic with no grace: the
    status it would write is carried in `conditions` (the grace counts from there)."""
    serialize = k8s.ApiClient().sanitize_for_serialization
    beats = heartbeats.from_leases(serialize(lease) for lease in lab.leases().values())
    view = quorum_loss.QuorumView(
        cluster=lab.cluster, kind_short="etcdc", replicas=3, kept=(0, 1, 2), raft=lab.membership(), heartbeats=beats,
        request=None, policy="Automatic", grace_seconds=0, lost_since=quorum_loss.lost_since({"conditions": conditions}),
        record=None, force_supported=True, now=now, new_id="r1",
        previous=quorum_loss.previous_condition({"conditions": conditions}))
    decision = quorum_loss.decide(view)
    conditions[:] = merge_conditions(conditions, [decision.condition], 1, now)
    return decision


async def member_ids(lab: Lab) -> dict[str, int]:
    return {m.name: m.id for m in await lab.members(0, 1, 2)}


async def nothing_forced(lab: Lab, ids: dict[str, int], writer: Writer) -> None:
    """The end of both tests: no member forced a new cluster, the same members, every acknowledged write."""
    assert not any("recovery: force" in lab.pod(o).log_text() for o in range(3))
    assert await member_ids(lab) == ids, "member IDs changed"
    verdict = await check([lab.pod(o).client_url for o in range(3)], writer.acked, lab.client_tls())
    assert verdict.acknowledged == len(writer.acked) > 100


async def test_a_healthy_cluster_whose_leader_and_one_follower_cannot_write_their_leases_is_not_recovered(
        make_lab) -> None:
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    ids = await member_ids(lab)
    writer = Writer([lab.pod(o).client_url for o in range(3)], lab.client_tls())
    writer.start()
    try:
        wait_for(lambda: writer.ok > 100, 30, "the writer running")
        leader = await lab.leader_ordinal()
        assert leader is not None
        silenced = [leader, next(o for o in range(3) if o != leader)]
        [witness] = [o for o in range(3) if o not in silenced]
        conditions: list[dict] = []
        with lease_writes_refused(lab.core.api_client, lab.namespace, [lab.pod(o).name for o in silenced]):
            def stale() -> bool:
                now = datetime.now(timezone.utc)
                beats = {b.ordinal: b for b in heartbeats.from_leases(
                    k8s.ApiClient().sanitize_for_serialization(lease) for lease in lab.leases().values())}
                return all(not beats[o].fresh(now) for o in silenced) and beats[witness].fresh(now)
            wait_for(stale, 60, f"the Leases of {silenced} stale, {witness}'s fresh")
            for _ in range(ROUNDS):
                decision = operator_round(lab, conditions, datetime.now(timezone.utc))
                assert decision.start is None, f"a recovery started on a healthy cluster: {decision}"
                assert decision.condition.status is False, decision.condition
                assert lab.pod(witness).name in decision.condition.message, decision.condition
                await asyncio.sleep(1)
            written = writer.ok
            wait_for(lambda: writer.ok > written + 50, 30, "Raft still committing with two Leases refused")
        print(f"operator's verdict with the Leases of {silenced} refused: {decision.condition.reason}: "
              f"{decision.condition.message}")
    finally:
        writer.stop()
    await nothing_forced(lab, ids, writer)


async def test_a_survivor_told_to_force_while_the_majority_has_a_leader_refuses_and_changes_nothing(
        make_lab) -> None:
    """The record a wrong verdict would write, by hand: the survivor's sidecar asks its peers first."""
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    ids = await member_ids(lab)
    leader = await lab.leader_ordinal()
    survivor = next(o for o in range(3) if o != leader)
    others = [o for o in range(3) if o != survivor]
    writer = Writer([lab.pod(o).client_url for o in others], lab.client_tls())
    writer.start()
    try:
        wait_for(lambda: writer.ok > 100, 30, "the writer running")
        st = await lab.status(survivor)
        record = record_recovery(lab, Survivor(pod=lab.pod(survivor).name, ordinal=survivor,
                                               member_id=f"{st.member_id:x}", committed=st.raft_index,
                                               term=st.raft_term, applied=st.raft_applied_index), "Automatic")
        pod = lab.pod(survivor)
        pod.kill()  # the operator restarts the survivor's pod; the majority's pods go on (their node cannot act)
        pod.start_sidecar()
        await lab.logged("recovery: refuse", survivor, timeout=30)
        assert "not starting alone" in pod.log_text() and "recovery: force" not in pod.log_text()
        assert not pod.startup_ok(), "the survivor's store may not start while it refuses"
        events = wait_for(lambda: [e for e in lab.core.list_namespaced_event(lab.namespace).items
                                   if e.reason == "QuorumRecoveryRefused"], 15, "the QuorumRecoveryRefused Event")
        assert record.id in events[0].message and pod.name in events[0].message, events[0].message
        print(f"the survivor refused: {events[0].message}")
        written = writer.ok
        wait_for(lambda: writer.ok > written + 50, 30, "the majority still committing")
        end_recovery(lab)  # what the refusal tells the user to do once the cluster serves
        pod.wait_startup(60)
        pod.start_store()
        pod.wait_ready(60)
        await lab.wait_voting(3, 60)
    finally:
        writer.stop()
    await nothing_forced(lab, ids, writer)
