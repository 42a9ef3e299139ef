"""The lab's default StorageClass: local PersistentVolumes, one directory on one node each.

hostPath volumes ignore `fsGroup` (and kube-controller-manager's hostPath provisioner makes
root-owned 0750 directories), so a member running as uid 65532 could not write its claim. A
local volume is pinned to its node by node affinity, and kubelet applies `fsGroup` to it.

`actions` decides (pure); tools.devcluster.nodes.Provisioner polls the API and carries them out.
The flow is the external-provisioner one: the claim waits for its first consumer, the
scheduler names the node (`volume.kubernetes.io/selected-node`), the volume is made there,
pre-bound to the claim; a released volume is deleted with its directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

STORAGE_CLASS = "lab-local"
PROVISIONER = "raftset.dev/lab-local"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


def storage_class() -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }


@dataclass(frozen=True)
class Create:
    volume: dict[str, Any]
    directory: Path


@dataclass(frozen=True)
class Delete:
    name: str
    directory: Path | None  # None: not in a node's volume directory, so not ours to remove


def volume_name(claim: dict[str, Any]) -> str:
    return f"pvc-{claim['metadata']['uid']}"


def persistent_volume(claim: dict[str, Any], node: str, directory: Path) -> dict[str, Any]:
    """A local volume on `node`, pre-bound to `claim`, as large as it asks."""
    meta = claim["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name(claim), "annotations": {PROVISIONED_BY: PROVISIONER}},
        "spec": {
            "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
            "accessModes": claim["spec"]["accessModes"],
            "volumeMode": "Filesystem",
            "storageClassName": STORAGE_CLASS,
            "persistentVolumeReclaimPolicy": "Delete",
            "local": {"path": str(directory)},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                         "name": meta["name"], "uid": meta["uid"]},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
        },
    }


def actions(claims: list[dict[str, Any]], volumes: list[dict[str, Any]],
            volume_dirs: dict[str, Path]) -> list[Create | Delete]:
    """What to do now: a volume for each pending claim of the class whose node is chosen and
    has none yet; the deletion of each of our volumes its claim has released.

    `volume_dirs` maps each lab node's name to the directory its volumes live in.
    """
    existing = {v["metadata"]["name"] for v in volumes}
    todo: list[Create | Delete] = []
    for claim in claims:
        node = (claim["metadata"].get("annotations") or {}).get(SELECTED_NODE)
        if (claim["spec"].get("storageClassName") != STORAGE_CLASS or claim.get("status", {}).get("phase") != "Pending"
                or node not in volume_dirs or volume_name(claim) in existing):
            continue
        directory = volume_dirs[node] / volume_name(claim)
        todo.append(Create(persistent_volume(claim, node, directory), directory))
    for volume in volumes:
        ours = (volume["metadata"].get("annotations") or {}).get(PROVISIONED_BY) == PROVISIONER
        if ours and volume.get("status", {}).get("phase") == "Released":
            path = Path(((volume["spec"].get("local") or {}).get("path")) or "/")
            todo.append(Delete(volume["metadata"]["name"], path if path.parent in volume_dirs.values() else None))
    return todo
