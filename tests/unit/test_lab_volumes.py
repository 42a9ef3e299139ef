"""The lab's local-volume provisioner's decisions (tools.devcluster.labvolumes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tools.devcluster import labvolumes

pytestmark = pytest.mark.unit

DIRS = {"node1": Path("/lab/node1/volumes"), "node2": Path("/lab/node2/volumes")}


def _claim(name: str = "data-kv-0", node: str | None = "node2", phase: str = "Pending",
           storage_class: str | None = labvolumes.STORAGE_CLASS) -> dict[str, Any]:
    annotations = {labvolumes.SELECTED_NODE: node} if node else {}
    return {"kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "annotations": annotations},
            "spec": {"storageClassName": storage_class, "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": phase}}


def test_a_claim_whose_node_is_chosen_gets_a_local_volume_there_bound_to_it() -> None:
    [action] = labvolumes.actions([_claim()], [], DIRS)
    assert isinstance(action, labvolumes.Create)
    assert action.directory == Path("/lab/node2/volumes/pvc-uid-data-kv-0")
    spec = action.volume["spec"]
    assert action.volume["metadata"]["name"] == "pvc-uid-data-kv-0"
    assert spec["local"] == {"path": str(action.directory)}
    assert spec["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node2"]}]
    assert spec["claimRef"] == {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "ns",
                                "name": "data-kv-0", "uid": "uid-data-kv-0"}
    assert (spec["capacity"], spec["accessModes"]) == ({"storage": "1Gi"}, ["ReadWriteOnce"])
    assert (spec["storageClassName"], spec["persistentVolumeReclaimPolicy"]) == (labvolumes.STORAGE_CLASS, "Delete")


@pytest.mark.parametrize("claim", [
    _claim(node=None),  # waiting for its first consumer
    _claim(phase="Bound"),
    _claim(storage_class="other"),
    _claim(node="not-a-lab-node"),
])
def test_other_claims_are_left_alone(claim: dict[str, Any]) -> None:
    assert labvolumes.actions([claim], [], DIRS) == []


def test_a_volume_is_made_once() -> None:
    [create] = labvolumes.actions([_claim()], [], DIRS)
    assert isinstance(create, labvolumes.Create)
    assert labvolumes.actions([_claim()], [create.volume], DIRS) == []


def _volume(path: str, phase: str, ours: bool = True) -> dict[str, Any]:
    annotations = {labvolumes.PROVISIONED_BY: labvolumes.PROVISIONER} if ours else {}
    return {"kind": "PersistentVolume", "metadata": {"name": "pvc-x", "annotations": annotations},
            "spec": {"local": {"path": path}}, "status": {"phase": phase}}


def test_a_released_volume_of_ours_goes_with_its_directory_and_only_inside_a_node_volume_dir() -> None:
    assert labvolumes.actions([], [_volume("/lab/node1/volumes/pvc-x", "Released")], DIRS) == [
        labvolumes.Delete("pvc-x", Path("/lab/node1/volumes/pvc-x"))]
    assert labvolumes.actions([], [_volume("/etc", "Released")], DIRS) == [labvolumes.Delete("pvc-x", None)]
    assert labvolumes.actions([], [_volume("/lab/node1/volumes/pvc-x", "Bound")], DIRS) == []
    assert labvolumes.actions([], [_volume("/lab/node1/volumes/pvc-x", "Released", ours=False)], DIRS) == []


def test_the_class_is_the_default_and_waits_for_the_first_consumer() -> None:
    sc = labvolumes.storage_class()
    assert sc["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
    assert (sc["provisioner"], sc["volumeBindingMode"], sc["reclaimPolicy"]) == (
        labvolumes.PROVISIONER, "WaitForFirstConsumer", "Delete")
