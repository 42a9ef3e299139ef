"""Heartbeat JSON, roles, the Lease body and when to write it."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from raftset import contract
from raftset.operator.pure.heartbeats import from_lease
from raftset.sidecar.pure.heartbeat import (beat, cluster_owner, event_subject, lease_body, owner_reference, role_of,
                                        should_write)
from raftset.sidecar.pure.readiness import Readiness, readiness
from tests.unit.sidecar_data import mid, status

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)


def test_roles() -> None:
    assert role_of(None) == contract.ROLE_UNKNOWN
    assert role_of(status(0, leader=0)) == contract.ROLE_LEADER
    assert role_of(status(1, leader=0)) == contract.ROLE_FOLLOWER
    assert role_of(status(1, learner=True)) == contract.ROLE_LEARNER
    assert role_of(status(1, leader=None)) == contract.ROLE_UNKNOWN  # no leader: an election is on


SERVING = Readiness(True, "")
READ_FAILED = "Range at http://demo-0:2379: timed out after 2.0s"


def test_heartbeat_fields() -> None:
    hb = beat("demo-0", status(0, leader=0, applied=42), NOW, serving=SERVING)
    assert hb.as_dict() == {
        "member_id": f"{mid(0):x}", "name": "demo-0", "role": "leader", "healthy": True, "raft_term": 3,
        "raft_index": 42, "raft_applied_index": 42, "time": "2026-01-01T12:00:00.123456Z", "cluster_id": "c1",
        "ready": True, "ready_reason": "",
    }


def test_a_leader_that_answers_status_but_serves_no_read_is_healthy_and_not_ready() -> None:
    """Health stays Status's (the planner, rolls and recovery use it); readiness is the read's verdict."""
    st = status(0, leader=0)
    hb = beat("demo-0", st, NOW, serving=readiness("started", st, READ_FAILED))
    assert (hb.role, hb.healthy, hb.ready) == ("leader", True, False)
    assert hb.ready_reason == f"a linearizable read failed: {READ_FAILED}"
    seen = from_lease(lease_body("demo-0", "ns", "demo", hb, duration=30, owner=None))
    assert seen is not None and (seen.healthy, seen.ready, seen.ready_reason) == (True, False, hb.ready_reason)


def test_a_change_of_readiness_is_written_at_once_a_new_reason_alone_is_not() -> None:
    st = status(0, leader=0)
    serving = beat("demo-0", st, NOW, serving=SERVING)
    failing = beat("demo-0", st, NOW, serving=readiness("started", st, READ_FAILED))
    failing_otherwise = beat("demo-0", st, NOW, serving=readiness("started", st, "connection refused"))
    assert should_write(serving, failing, 100.0, 101.0, 30)
    assert should_write(failing, serving, 100.0, 101.0, 30)
    assert not should_write(failing, failing_otherwise, 100.0, 101.0, 30)


def test_unanswered_heartbeat_keeps_the_known_id_and_is_unhealthy() -> None:
    unanswered = readiness("started", None, None)
    hb = beat("demo-1", None, NOW, known_id=0xAB, serving=unanswered)
    assert (hb.member_id, hb.role, hb.healthy, hb.cluster_id) == ("ab", "unknown", False, "")
    assert (hb.ready, hb.ready_reason) == (False, "the store does not answer Status")
    assert beat("demo-1", None, NOW, serving=unanswered).member_id == ""


def test_member_with_errors_is_unhealthy() -> None:
    assert not beat("demo-0", status(0, errors=("NOSPACE",)), NOW, serving=SERVING).healthy


def test_writes_on_change_plus_a_slow_refresh() -> None:
    a = beat("demo-0", status(0, leader=0), NOW, serving=SERVING)
    b = beat("demo-0", status(0, leader=0, applied=999), NOW, serving=SERVING)  # index moved only
    c = beat("demo-0", status(0, leader=1), NOW, serving=SERVING)  # lost leadership
    assert should_write(None, a, None, 0.0, 30)
    assert not should_write(a, b, 100.0, 110.0, 30)
    assert should_write(a, b, 100.0, 130.0, 30)
    assert should_write(a, c, 100.0, 101.0, 30)


def test_lease_body_is_what_the_operator_reads() -> None:
    hb = beat("demo-2", status(2, leader=2), NOW, serving=SERVING)
    owner = owner_reference({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "demo", "uid": "u"}})
    body = lease_body("demo-2", "ns", "demo", hb, duration=90, owner=owner)
    meta = body["metadata"]
    assert meta["name"] == contract.lease_name("demo-2") and meta["namespace"] == "ns"
    assert meta["labels"] == {**contract.selector_labels("demo"), contract.LABEL_HEARTBEAT: "true",
                              contract.LABEL_ROLE: "leader"}
    assert json.loads(meta["annotations"][contract.ANNOTATION_HEARTBEAT]) == hb.as_dict()
    assert meta["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "demo", "uid": "u"}]
    assert body["spec"] == {"holderIdentity": "demo-2", "leaseDurationSeconds": 90, "renewTime": hb.time}
    # The operator's own reader understands it.
    seen = from_lease(body)
    assert seen is not None and (seen.ordinal, seen.role, seen.healthy, seen.ready) == (2, "leader", True, True)
    assert seen.member_id == f"{mid(2):x}"


def test_no_owner_without_a_uid() -> None:
    assert owner_reference(None) is None and owner_reference({"metadata": {"name": "x"}}) is None


CLUSTER_REF = {"apiVersion": contract.API_VERSION, "kind": "EtcdCluster", "name": "demo", "uid": "c-uid",
               "controller": True, "blockOwnerDeletion": True}
WORKLOAD = {"apiVersion": "apps.kruise.io/v1beta1", "kind": "StatefulSet",
            "metadata": {"name": "demo", "uid": "w-uid", "ownerReferences": [CLUSTER_REF]}}


def test_the_membership_record_is_owned_by_the_cluster_object_so_it_outlives_the_workload() -> None:
    """Issue 30, bug 6: owned by the workload, the record was garbage-collected with it, and the
    operator re-created a deleted workload at full size, its holes filled by new members."""
    assert cluster_owner(WORKLOAD) == {"apiVersion": contract.API_VERSION, "kind": "EtcdCluster", "name": "demo",
                                       "uid": "c-uid"}
    assert owner_reference(WORKLOAD)["uid"] == "w-uid"  # the heartbeat Leases still go with the workload
    assert event_subject(WORKLOAD, "ns") == {**cluster_owner(WORKLOAD), "namespace": "ns"}  # type: ignore[dict-item]


@pytest.mark.parametrize("refs", [
    [],
    [{**CLUSTER_REF, "controller": False}],  # owned, but not controlled, by the cluster object
    [{**CLUSTER_REF, "apiVersion": "example.com/v1"}],  # another operator's object
])
def test_without_a_controlling_cluster_object_the_workload_owns_it(refs: list[dict[str, object]]) -> None:
    workload = {**WORKLOAD, "metadata": {**WORKLOAD["metadata"], "ownerReferences": refs}}  # type: ignore[dict-item]
    assert cluster_owner(workload) == owner_reference(workload)
    assert cluster_owner(None) is None
