"""Issue 28: the member pods and the workloads as the operator's own watches file them, and which
cluster each change rings (what kopf's indices and event handlers did before)."""

from __future__ import annotations

from typing import Any

import pytest

from raftset import contract
from raftset.operator.pure.books import Change
from raftset.operator.pure.podbook import PodBook
from raftset.operator.pure.workloadbook import WorkloadBook, owner
from tests.unit.builders import NOW

pytestmark = pytest.mark.unit

KEY = ("db", "demo")


def pod(name: str = "demo-0", version: str = "1", cluster: str | None = "demo",
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {contract.LABEL_NAME: contract.MANAGER, **({contract.LABEL_INSTANCE: cluster} if cluster else {})}
    return {"metadata": {"name": name, "namespace": "db", "resourceVersion": version, "labels": labels,
                         "annotations": annotations or {}}}


def workload(version: str = "1", generation: int = 1, observed: int = 1, cluster: str = "demo",
             controller: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": cluster, "namespace": "db", "resourceVersion": version, "generation": generation,
                         "managedFields": [{"manager": "x"}],
                         "ownerReferences": [{"apiVersion": contract.API_VERSION, "kind": "EtcdCluster",
                                              "name": cluster, "controller": controller}]},
            "spec": {"replicas": 3}, "status": {"observedGeneration": observed}}


def test_a_pod_change_rings_its_cluster_and_a_relist_of_it_unchanged_does_not() -> None:
    book = PodBook()
    assert book.seen(pod(), NOW) == Change(KEY, "demo-0", ring=True)
    assert book.listed([pod()], "db", NOW) == [Change(KEY, "demo-0", ring=False)]
    assert book.seen(pod(version="2"), NOW) == Change(KEY, "demo-0", ring=True)
    assert book.seen(pod(cluster=None), NOW) == Change(KEY, "demo-0", ring=True, gone=True), "unlabelled: gone"
    assert book.seen(pod(cluster=None), NOW) is None


def test_the_scale_away_mark_and_replace_requests_read_as_kopfs_indices_did() -> None:
    book = PodBook()
    book.seen(pod("demo-0", annotations={contract.ANNOTATION_SCALE_AWAY: "t"}), NOW)
    book.seen(pod("demo-1", annotations={contract.ANNOTATION_REPLACE: "now",
                                         contract.ANNOTATION_REPLACE_PROGRESS: "{}"}), NOW)
    book.seen(pod("demo-2"), NOW)
    marks, replacements, _ = book.views()
    assert marks.get(KEY) == ["demo-0"]
    [request] = replacements.get(KEY, [])
    assert request["pod"] == "demo-1" and request["progress"] == "{}"
    book.seen(pod("demo-0", version="2"), NOW)  # the mark taken off
    book.deleted("db", "demo-1")
    marks, replacements, _ = book.views()
    assert marks.get(KEY, []) == [] and replacements.get(KEY, []) == [] and KEY not in marks


def placed(name: str, ready: bool | None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    out = pod(name, annotations=annotations)
    out["spec"] = {"nodeName": "node3"}
    if ready is not None:
        out["status"] = {"conditions": [{"type": "Ready", "status": str(ready)}]}
    return out


def test_placed_pods_not_ready_or_in_a_node_loss_are_the_ones_a_round_reads_nodes_for() -> None:
    book = PodBook()
    book.seen(placed("demo-0", True), NOW)
    book.seen(placed("demo-1", False), NOW)
    book.seen(placed("demo-2", None), NOW)  # no condition yet: not Ready
    book.seen(pod("demo-3"), NOW)  # not placed: the scheduler's business
    book.seen(placed("demo-4", True, {contract.ANNOTATION_NODE_LOST: "{}"}), NOW)
    book.seen(placed("demo-5", True, {contract.ANNOTATION_NODE_LOST_REMOVAL: "{}"}), NOW)
    assert sorted(book.views()[2].get(KEY, [])) == ["demo-1", "demo-2", "demo-4", "demo-5"]
    book.seen(placed("demo-1", True), NOW)
    book.deleted("db", "demo-2")
    assert sorted(book.views()[2].get(KEY, [])) == ["demo-4", "demo-5"]
    book.forget(KEY)
    assert book.views()[2].get(KEY, []) == []


def test_a_relist_drops_the_pods_a_watch_gap_hid_in_its_namespace_only() -> None:
    book = PodBook()
    book.seen(pod("demo-0", annotations={contract.ANNOTATION_SCALE_AWAY: "t"}), NOW)
    other = pod("demo-0")
    other["metadata"]["namespace"] = "other"
    book.seen(other, NOW)
    assert book.listed([], "db", NOW) == [Change(KEY, "demo-0", ring=True, gone=True)]
    assert book.views()[0].get(KEY, []) == [] and ("other", "demo-0") in book.filed
    book.forget(("other", "demo"))
    assert book.filed == {}


def test_a_workload_is_filed_under_its_controlling_cluster_without_managed_fields() -> None:
    book = WorkloadBook()
    assert book.seen(workload(), NOW) == Change(KEY, "demo", ring=True)
    [cached] = book.view().get(KEY, [])
    assert "managedFields" not in cached["metadata"] and cached["spec"] == {"replicas": 3}
    assert owner(workload(controller=False)) is None
    assert book.seen(workload(version="2", controller=False), NOW) == \
        Change(KEY, "demo", ring=True, gone=True, drift=True), "orphaned behind our back"


def test_a_status_move_rings_a_spec_edit_or_deletion_is_a_drift_and_a_relist_rings_nothing() -> None:
    book = WorkloadBook()
    book.seen(workload(), NOW)
    assert book.listed([workload()], "db", NOW) == [Change(KEY, "demo", ring=False)]
    assert book.seen(workload(version="2"), NOW) == Change(KEY, "demo", ring=True), "the controller's status"
    assert book.seen(workload(version="3", generation=2), NOW) == Change(KEY, "demo", ring=True, drift=True)
    assert book.deleted("db", "demo") == Change(KEY, "demo", ring=True, gone=True, drift=True)
    assert book.view().get(KEY, []) == []
    assert book.seen(workload(version="4", generation=2), NOW) == Change(KEY, "demo", ring=True), \
        "created anew (by a round): no drift"


def test_a_pod_the_scheduler_refused_is_read_too_its_volume_may_be_pinned_to_a_deleted_node() -> None:
    book = PodBook()
    refused = {**pod("demo-2"), "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}
    waiting = {**pod("demo-3"), "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}}
    book.seen(refused, NOW)
    book.seen(waiting, NOW)
    assert sorted(book.views()[2].get(KEY, [])) == ["demo-2"]
