"""Naming the real cause of a member that has not joined (issue 14 item 5): pure decisions."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from raftset.operator.pure.diagnosis import (
    DEFAULT_CLASS_ANNOTATION, NEVER_STARTED_AFTER_SECONDS, Diagnosed, claim_problem, diagnose, look_again,
    never_started, pending_claims, storage_class_problem)
from tests.unit.builders import CLUSTER, NOW, member

pytestmark = pytest.mark.unit


def pvc(ordinal: int, phase: str = "Pending") -> dict[str, Any]:
    return {"metadata": {"name": f"data-{CLUSTER}-{ordinal}"}, "status": {"phase": phase}}


def event(claim: str, message: str, *, reason: str = "ProvisioningFailed", kind: str = "Warning",
          at: str = "2026-01-01T11:59:00Z") -> dict[str, Any]:
    return {"involvedObject": {"kind": "PersistentVolumeClaim", "name": claim}, "type": kind, "reason": reason,
            "message": message, "lastTimestamp": at}


def storage_class(name: str, default: bool = False) -> dict[str, Any]:
    annotations = {DEFAULT_CLASS_ANNOTATION: "true"} if default else {}
    return {"metadata": {"name": name, "annotations": annotations}}


def pod(ordinal: int, *, phase: str = "Running", age: float = 120, statuses: list[dict[str, Any]] | None = None
        ) -> dict[str, Any]:
    started = (NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"name": f"{CLUSTER}-{ordinal}"},
            "status": {"phase": phase, "startTime": started, "containerStatuses": statuses or []}}


def test_only_existing_pending_member_claims_of_the_missing_ordinals() -> None:
    pvcs = [pvc(0), pvc(1, "Bound"), pvc(2), {"metadata": {"name": "data-other-0"}, "status": {"phase": "Pending"}}]
    assert pending_claims(CLUSTER, [0, 1, 3], pvcs) == ["data-demo-0"]


def test_a_missing_named_class_is_the_cause() -> None:
    got = storage_class_problem("fast", ["data-demo-0"], [storage_class("standard", default=True)])
    assert got is not None and got[0] == "StorageClassMissing"
    assert "'fast'" in got[1] and "data-demo-0" in got[1]


def test_no_class_and_no_default_class_is_the_cause() -> None:
    got = storage_class_problem(None, ["data-demo-0", "data-demo-1"], [storage_class("standard")])
    assert got is not None and got[0] == "StorageClassMissing" and "no default StorageClass" in got[1]
    assert "data-demo-0, data-demo-1" in got[1]


@pytest.mark.parametrize(("wanted", "classes"), [
    ("fast", [storage_class("fast")]),
    (None, [storage_class("standard", default=True)]),
])
def test_an_existing_class_is_no_cause(wanted: str | None, classes: list[dict[str, Any]]) -> None:
    assert storage_class_problem(wanted, ["data-demo-0"], classes) is None


def test_without_a_pending_claim_a_missing_class_is_no_cause() -> None:
    """Claims bound to pre-made volumes need no class."""
    assert storage_class_problem("fast", [], []) is None


def test_a_pending_claim_is_named_with_its_latest_telling_event() -> None:
    events = [event("data-demo-0", "old news", at="2026-01-01T11:00:00Z"),
              event("data-demo-0", "no volume plugin matched", at="2026-01-01T11:59:00Z"),
              event("data-demo-9", "another claim")]
    got = claim_problem(["data-demo-0"], events)
    assert got == ("ClaimPending", "PersistentVolumeClaim data-demo-0 is Pending: ProvisioningFailed: "
                                   "no volume plugin matched")


def test_the_binders_normal_failed_binding_event_tells_too() -> None:
    events = [event("data-demo-1", "no persistent volumes available for this claim and no storage class is set",
                    reason="FailedBinding", kind="Normal")]
    got = claim_problem(["data-demo-1"], events)
    assert got is not None and "no storage class is set" in got[1]


def test_a_claim_still_provisioning_is_no_problem_yet() -> None:
    events = [event("data-demo-0", "waiting for first consumer to be created before binding",
                    reason="WaitForFirstConsumer", kind="Normal")]
    assert claim_problem(["data-demo-0"], events) is None
    assert claim_problem(["data-demo-0"], []) is None


def test_a_running_pod_without_any_heartbeat_past_the_grace_never_started_its_store() -> None:
    got = never_started(CLUSTER, [0, 1], [pod(0), pod(1, age=5)], [], "etcd", NOW)
    assert got is not None and got[0] == "StoreNeverStarted"
    assert "demo-0 has been Running" in got[1] and "demo-1" not in got[1]


def test_the_store_containers_own_state_is_quoted() -> None:
    statuses = [{"name": "etcd", "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}}},
                {"name": "sidecar", "state": {"running": {}}}]
    got = never_started(CLUSTER, [0], [pod(0, statuses=statuses)], [], "etcd", NOW)
    assert got is not None and "CrashLoopBackOff back-off 40s" in got[1]
    statuses = [{"name": "etcd", "state": {"running": {}},
                 "lastState": {"terminated": {"exitCode": 2, "reason": "Error"}}}]
    got = never_started(CLUSTER, [0], [pod(0, statuses=statuses)], [], "etcd", NOW)
    assert got is not None and "exited with code 2 (Error)" in got[1]


def pod_event(name: str, message: str, *, reason: str = "NotRunLocally", kind: str = "Warning",
              at: str = "2026-01-01T11:59:00Z", involved: str = "Pod") -> dict[str, Any]:
    return {"involvedObject": {"kind": involved, "name": name}, "type": kind, "reason": reason,
            "message": message, "lastTimestamp": at}


def test_the_latest_warning_event_on_a_silent_pod_is_quoted() -> None:
    events = [pod_event("demo-0", "engine not run here", at="2026-01-01T11:58:00Z"),
              pod_event("demo-0", "not run by make run's pod runner: no CA key"),
              pod_event("demo-0", "Started container etcd", reason="Started", kind="Normal",
                        at="2026-01-01T11:59:30Z"),
              pod_event("demo-1", "about another pod", reason="Failed"),
              pod_event("demo-0", "a claim of the same name", reason="ProvisioningFailed",
                        involved="PersistentVolumeClaim", at="2026-01-01T11:59:40Z")]
    got = never_started(CLUSTER, [0], [pod(0), pod(1, age=5)], [], "etcd", NOW, events)
    assert got is not None and got[0] == "StoreNeverStarted"
    assert got[1].endswith("its latest Warning Event: NotRunLocally: not run by make run's pod runner: no CA key")
    assert "about another pod" not in got[1] and "Started container" not in got[1]


def test_a_silent_pod_without_warnings_quotes_nothing() -> None:
    normal = [pod_event("demo-0", "Started container etcd", reason="Started", kind="Normal")]
    got = never_started(CLUSTER, [0], [pod(0)], [], "etcd", NOW, normal)
    assert got is not None and "Warning Event" not in got[1]


def test_diagnose_passes_the_pod_events_through() -> None:
    got = diagnose(CLUSTER, [0], storage_class=None, ephemeral=True, pvcs=[], classes=[], pods=[pod(0)], heartbeats=[],
                   store="etcd", now=NOW, events=[pod_event("demo-0", "Back-off pulling image", reason="Failed")])
    assert got is not None and got[0] == "StoreNeverStarted" and "Failed: Back-off pulling image" in got[1]


@pytest.mark.parametrize("case", ["heartbeat seen", "pending pod", "young pod", "not missing", "terminating"])
def test_no_store_problem_where_there_is_none(case: str) -> None:
    pods = [pod(0, phase="Pending") if case == "pending pod" else pod(0, age=NEVER_STARTED_AFTER_SECONDS - 1)
            if case == "young pod" else pod(0)]
    if case == "terminating":
        pods[0]["metadata"]["deletionTimestamp"] = "2026-01-01T11:59:59Z"
    records = [member(0, age=600)] if case == "heartbeat seen" else []
    ordinals = [] if case == "not missing" else [0]
    assert never_started(CLUSTER, ordinals, pods, records, "etcd", NOW) is None


def test_the_most_upstream_cause_wins() -> None:
    kwargs: dict[str, Any] = dict(storage_class="fast", ephemeral=False, pods=[pod(0)], heartbeats=[], store="etcd",
                                  now=NOW, events=[event("data-demo-0", "storageclass \"fast\" not found")])
    got = diagnose(CLUSTER, [0], pvcs=[pvc(0)], classes=[], **kwargs)
    assert got is not None and got[0] == "StorageClassMissing"
    got = diagnose(CLUSTER, [0], pvcs=[pvc(0)], classes=[storage_class("fast")], **kwargs)
    assert got is not None and got[0] == "ClaimPending"
    got = diagnose(CLUSTER, [0], pvcs=[pvc(0, "Bound")], classes=[], **kwargs)
    assert got is not None and got[0] == "StoreNeverStarted"
    assert diagnose(CLUSTER, [], pvcs=[pvc(0)], classes=[], **kwargs) is None


def test_an_ephemeral_cluster_has_no_claims_to_blame() -> None:
    got = diagnose(CLUSTER, [0], storage_class=None, ephemeral=True, pvcs=[pvc(0)], events=[], classes=[],
                   pods=[pod(0)], heartbeats=[], store="etcd", now=NOW)
    assert got is not None and got[0] == "StoreNeverStarted"


# --- how often the pods are listed again for a cause ------------------------------------------

EVERY = timedelta(seconds=15)
LAST = Diagnosed(missing=(0,), at=NOW, cause=("StoreNeverStarted", "demo-0 has been Running for 5m"))


def test_the_first_look_is_due() -> None:
    assert look_again(None, (0,), NOW, EVERY)


def test_a_cause_stands_until_it_is_old() -> None:
    assert not look_again(LAST, (0,), NOW + timedelta(seconds=14), EVERY)
    assert look_again(LAST, (0,), NOW + timedelta(seconds=15), EVERY)


def test_other_missing_members_or_a_spec_change_look_again_at_once() -> None:
    assert look_again(LAST, (0, 1), NOW + timedelta(seconds=1), EVERY)
    assert look_again(LAST, (0,), NOW + timedelta(seconds=1), EVERY, forced=True)
