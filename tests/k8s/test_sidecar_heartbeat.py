"""The sidecar against a real kube-apiserver, with the member RBAC the operator renders.

The heartbeat Lease and the pod's role label appear and follow leadership, the leader
writes the membership Lease; the scale-away decision reads the real workload and pod objects.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from kubernetes import watch as k8s_watch

from raftset import contract
from raftset.sidecar.pure import leave
from raftset.sidecar.io.kube import SidecarKube
from raftset.operator.pure.heartbeats import from_lease
from raftset.workloads import STATEFULSET
from tests.harness.lab import Lab, wait_for

pytestmark = pytest.mark.k8s


def lease_roles(lab: Lab) -> dict[str, str]:
    return {holder: lease.metadata.labels.get(contract.LABEL_ROLE) for holder, lease in lab.leases().items()}


def pod_roles(lab: Lab, ordinals: range) -> dict[str, str]:
    return {f"demo-{o}": (lab.pod_object(o).metadata.labels or {}).get(contract.LABEL_ROLE) for o in ordinals}


async def test_lease_and_role_label_appear_and_follow_leadership(lab) -> None:
    lab = lab(replicas=3)
    for ordinal in range(3):
        lab.pod(ordinal).start()
        lab.pod(ordinal).wait_ready()
    await lab.wait_voting(3)
    leader = await lab.leader_ordinal()
    assert leader is not None

    def roles_match(expected_leader: int) -> bool:
        expected = {f"demo-{o}": "leader" if o == expected_leader else "follower" for o in range(3)}
        return lease_roles(lab) == expected and pod_roles(lab, range(3)) == expected

    wait_for(lambda: roles_match(leader), 15, f"Leases and pod labels naming demo-{leader} leader")

    leases = lab.leases()
    one = leases["demo-1"]
    assert one.metadata.name == contract.lease_name("demo-1")
    assert one.spec.lease_duration_seconds == 15  # 3 x the 5 s refresh of the test settings
    assert one.metadata.labels[contract.LABEL_HEARTBEAT] == "true"
    assert all(one.metadata.labels[k] == v for k, v in contract.selector_labels("demo").items())
    beat = json.loads(one.metadata.annotations[contract.ANNOTATION_HEARTBEAT])
    assert beat["name"] == "demo-1" and beat["member_id"] == lab.pod(1).heartbeat()["member_id"]
    assert [r.kind for r in one.metadata.owner_references] == ["StatefulSet"]
    # The operator's reader sees what the sidecar wrote, the readiness verdict included (the
    # Lease write that carries it follows the read that made the pod Ready).
    record = from_lease(lab.coordination.api_client.sanitize_for_serialization(one))
    assert record is not None and record.ordinal == 1 and record.healthy

    def ready_record() -> bool:
        seen = from_lease(lab.coordination.api_client.sanitize_for_serialization(lab.leases()["demo-1"]))
        return seen is not None and seen.ready and seen.ready_reason == ""
    wait_for(ready_record, 10, "demo-1's Lease saying it serves linearizable reads")

    # The leader's sidecar may write the membership Lease under the same Role. The record it wrote
    # while demo-2 was a learner (unnamed until it started) may still stand: wait for the one after.
    names = {"demo-0", "demo-1", "demo-2"}
    membership = wait_for(lambda: (m := lab.membership()) is not None and m.leader == f"demo-{leader}"
                          and {x.name for x in m.members} == names and not any(x.learner for x in m.members)
                          and m, 15, "the membership Lease written by the leader, naming three voters")
    assert len(membership.members) == 3
    written = lab.coordination.read_namespaced_lease(contract.membership_lease_name("demo"), lab.namespace)
    assert [r.kind for r in written.metadata.owner_references] == ["StatefulSet"]
    assert not any("membership lease" in lab.pod(o).log_text() for o in range(3))

    new_leader = (leader + 1) % 3
    await lab.move_leader_to(new_leader)
    wait_for(lambda: roles_match(new_leader), 15, f"Leases and pod labels following the leader to demo-{new_leader}")


async def test_lease_is_written_on_change_plus_a_slow_refresh_not_every_poll(lab) -> None:
    lab = lab(replicas=1)
    lab.pod(0).start()
    lab.pod(0).wait_ready()
    wait_for(lambda: lease_roles(lab) == {"demo-0": "leader"}, 15, "leader Lease")

    # Every write of the Lease, as the apiserver's watch delivers it: the sidecar polls every 0.5 s
    # and writes on change plus a refresh every 5 s, so with nothing changing the writes are 5 s apart.
    name = contract.lease_name("demo-0")
    writes: list[float] = []
    stream = k8s_watch.Watch()
    for event in stream.stream(lab.coordination.list_namespaced_lease, lab.namespace,
                               field_selector=f"metadata.name={name}", timeout_seconds=40):
        if event["type"] == "MODIFIED":
            writes.append(event["object"].spec.renew_time.timestamp())
        if len(writes) == 4:
            stream.stop()
    assert len(writes) == 4, f"only {len(writes)} refreshes in 40 s"
    gaps = [round(later - earlier, 2) for earlier, later in zip(writes, writes[1:])]
    assert all(4.5 <= gap for gap in gaps), f"a write between refreshes (gaps between writes: {gaps} s)"


async def test_scaled_away_member_deletes_its_lease(lab) -> None:
    lab = lab(replicas=2)
    for ordinal in range(2):
        lab.pod(ordinal).start()
        lab.pod(ordinal).wait_ready()
    await lab.wait_voting(2)
    wait_for(lambda: set(lab.leases()) == {"demo-0", "demo-1"}, 15, "two Leases")
    lab.scale(1)
    result = lab.pod(1).terminate()
    assert result is not None and result["removed"], result
    assert set(lab.leases()) == {"demo-0"}


async def test_scale_away_decision_reads_the_real_workload_and_pod(lab) -> None:
    lab = lab(replicas=3)
    for ordinal in range(3):
        lab.create_pod(ordinal)
    kube = SidecarKube.load(lab.namespace, lab.env_extra["KUBECONFIG"])  # the member's own rights
    try:
        async def fate(ordinal: int) -> leave.Fate:
            workload = await kube.workload(STATEFULSET, lab.cluster)
            pod = await kube.pod(contract.pod_name(lab.cluster, ordinal))
            assert pod is not None
            return leave.fate(ordinal, STATEFULSET, workload, pod)

        assert [(await fate(o)).scaled_away for o in range(3)] == [False, False, False]
        lab.scale(2)
        assert [(await fate(o)).scaled_away for o in range(3)] == [False, False, True]
        lab.annotate_pod(0, {contract.ANNOTATION_SCALE_AWAY: "true"})
        marked = await fate(0)
        assert not marked.scaled_away and "stale mark" in marked.reason  # the workload decides
        lab.annotate_pod(0, {contract.ANNOTATION_SCALE_AWAY: None})
        assert not (await fate(0)).scaled_away
        # Cluster deletion: the workload goes away (here held by a finalizer) -> keep.
        lab.apps.patch_namespaced_stateful_set(lab.cluster, lab.namespace,
                                               {"metadata": {"finalizers": ["raftset.dev/test-hold"]}})
        lab.apps.delete_namespaced_stateful_set(lab.cluster, lab.namespace)
        got = await fate(2)
        assert not got.scaled_away and "deleted" in got.reason
        lab.apps.patch_namespaced_stateful_set(lab.cluster, lab.namespace, {"metadata": {"finalizers": None}})
        await asyncio.sleep(0.5)
        got = await fate(2)
        assert not got.scaled_away and "gone" in got.reason
    finally:
        await kube.close()
        for ordinal in range(3):
            lab.delete_pod(ordinal)
            lab.release_pod(ordinal)
