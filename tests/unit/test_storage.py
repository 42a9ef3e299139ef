"""PVC expansion: grow by patching claims, keep the claim template, refuse to shrink."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from raftset.operator.pure import storage
from raftset.operator.components.workload import workload_manifest
from raftset.operator.components.claims import ensure_claims
from raftset.operator.pure.storage import ANNOTATION_FAILED, ANNOTATION_SIZE, Claims
from tests.unit.builders import cluster, owned_objects

pytestmark = pytest.mark.unit


def live(size: str = "1Gi", **annotations: str) -> dict[str, Any]:
    """The workload as the apiserver returns it after an earlier apply."""
    obj = workload_manifest(cluster(storage={"size": size}), 3)
    obj["metadata"]["annotations"] = dict(annotations)
    return obj


def pvc(name: str, size: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"resources": {"requests": {"storage": size}}}}


# --- decisions ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("a", "b"), [("1Gi", "1024Mi"), ("1G", "1000M"), ("512Mi", "0.5Gi")])
def test_quantities_compare_by_value(a: str, b: str) -> None:
    assert storage.quantity(a) == storage.quantity(b)


def test_template_size() -> None:
    assert storage.template_size(live("3Gi")) == "3Gi"
    assert storage.template_size(None) is None
    assert storage.template_size(workload_manifest(cluster(storage={"ephemeral": True}), 3)) is None


@pytest.mark.parametrize(("desired", "workload", "claims", "reason"), [
    # a new cluster: the template says what the spec says
    ("2Gi", None, Claims("2Gi", "2Gi"), None),
    # unchanged
    ("1Gi", live("1Gi"), Claims("1Gi", "1Gi"), None),
    ("1024Mi", live("1Gi"), Claims("1Gi", "1024Mi"), None),
    # grow: the template stays, the PVCs follow
    ("5Gi", live("1Gi"), Claims("1Gi", "5Gi"), None),
    ("8Gi", live("1Gi", **{ANNOTATION_SIZE: "5Gi"}), Claims("1Gi", "8Gi"), None),
    # shrink: refused, whatever was reached is kept
    ("512Mi", live("1Gi"), Claims("1Gi", "1Gi"), "StorageShrinkRefused"),
    ("2Gi", live("1Gi", **{ANNOTATION_SIZE: "5Gi"}), Claims("1Gi", "5Gi"), "StorageShrinkRefused"),
    # an expansion the apiserver refused stays reported until it works or the spec changes
    ("5Gi", live("1Gi", **{ANNOTATION_FAILED: "5Gi"}), Claims("1Gi", "1Gi", "5Gi"), "StorageExpansionFailed"),
    ("6Gi", live("1Gi", **{ANNOTATION_FAILED: "5Gi"}), Claims("1Gi", "6Gi"), None),
    ("1Gi", live("1Gi", **{ANNOTATION_FAILED: "5Gi"}), Claims("1Gi", "1Gi"), None),
])
def test_decide(desired: str, workload: dict[str, Any] | None, claims: Claims, reason: str | None) -> None:
    got, problem = storage.decide(desired, workload)
    assert got == claims
    assert (problem[0] if problem else None) == reason


def test_shrink_message_says_what_to_do() -> None:
    _, problem = storage.decide("512Mi", live("1Gi"))
    assert problem is not None
    assert "512Mi" in problem[1] and "1Gi" in problem[1] and "cannot shrink" in problem[1]


def test_expansion_failure_message_names_the_storage_class_setting() -> None:
    _, problem = storage.decide("5Gi", live("1Gi", **{ANNOTATION_FAILED: "5Gi"}))
    assert problem is not None and "allowVolumeExpansion: true" in problem[1]


@pytest.mark.parametrize(("name", "member"), [
    ("data-kv-0", True), ("data-kv-12", True), ("data-kv-x", False), ("data-kv", False),
    ("data-kv-extra-0", False), ("data-other-0", False), ("logs-kv-0", False),
])
def test_member_claim(name: str, member: bool) -> None:
    assert storage.member_claim("kv", name) is member


def test_to_expand_picks_smaller_member_claims_only() -> None:
    pvcs = [pvc("data-kv-0", "1Gi"), pvc("data-kv-1", "5Gi"), pvc("data-kv-2", "8Gi"),
            pvc("data-kv-3", "1024Mi"), pvc("data-other-0", "1Gi"), {"metadata": {"name": "data-kv-4"}}]
    assert storage.to_expand("kv", pvcs, "5Gi") == ["data-kv-0", "data-kv-3"]


def test_expanded() -> None:
    assert storage.expanded("1Gi", "1Gi", "5Gi", failure=False) == (Claims("1Gi", "5Gi"), None)
    claims, problem = storage.expanded("1Gi", "2Gi", "5Gi", failure=True)
    assert claims == Claims("1Gi", "2Gi", "5Gi") and problem is not None
    assert storage.decide("5Gi", {**live("1Gi"), "metadata": {"annotations": claims.annotations()}})[1] == problem


# --- rendering ------------------------------------------------------------------------------------

def test_the_renderer_keeps_the_claim_template_and_records_the_size() -> None:
    c = cluster(storage={"size": "5Gi"})
    claims, _ = storage.decide("5Gi", live("1Gi"))
    obj = workload_manifest(c, 3, claims=claims)
    (template,) = obj["spec"]["volumeClaimTemplates"]
    assert template["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert obj["metadata"]["annotations"] == {ANNOTATION_SIZE: "5Gi"}
    objects = owned_objects(c, 3, claims=Claims("1Gi", "1Gi", "5Gi"))
    assert objects[-1]["metadata"]["annotations"] == {ANNOTATION_SIZE: "1Gi", ANNOTATION_FAILED: "5Gi"}


def test_without_claims_the_spec_size_is_rendered() -> None:
    obj = workload_manifest(cluster(storage={"size": "5Gi"}), 3)
    assert obj["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert "annotations" not in obj["metadata"]


# --- the shell, against an in-memory API ------------------------------------------------------------

class MemoryPVCs:
    def __init__(self, pvcs: list[dict[str, Any]], refuse: bool = False) -> None:
        self.pvcs = {p["metadata"]["name"]: p for p in pvcs}
        self.refuse = refuse
        self.patched: list[tuple[str, str]] = []
        self.selectors: list[str] = []

    async def list(self, api_version: str, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        assert (api_version, kind, namespace) == ("v1", "PersistentVolumeClaim", "db")
        self.selectors.append(selector)
        return list(self.pvcs.values())

    async def merge_patch(self, api_version: str, kind: str, namespace: str, name: str,
                          patch: Mapping[str, Any]) -> None:
        if self.refuse:
            raise ApiException(status=403, reason="Forbidden")
        size = patch["spec"]["resources"]["requests"]["storage"]
        self.pvcs[name]["spec"]["resources"]["requests"]["storage"] = size
        self.patched.append((name, size))


def demo_pvcs(*sizes: str) -> list[dict[str, Any]]:
    return [pvc(f"data-demo-{i}", size) for i, size in enumerate(sizes)]


async def test_growth_patches_each_smaller_claim() -> None:
    api = MemoryPVCs(demo_pvcs("1Gi", "1Gi", "5Gi"))
    claims, problem = await ensure_claims(api, cluster(storage={"size": "5Gi"}), live("1Gi"))
    assert (claims, problem) == (Claims("1Gi", "5Gi"), None)
    assert api.patched == [("data-demo-0", "5Gi"), ("data-demo-1", "5Gi")]
    assert api.selectors == ["app.kubernetes.io/instance=demo,app.kubernetes.io/name=raftset"]


async def test_a_refused_patch_is_recorded_and_reported() -> None:
    api = MemoryPVCs(demo_pvcs("1Gi"), refuse=True)
    claims, problem = await ensure_claims(api, cluster(storage={"size": "5Gi"}), live("1Gi"))
    assert claims == Claims("1Gi", "1Gi", "5Gi")
    assert problem is not None and problem[0] == "StorageExpansionFailed"


async def test_a_shrink_patches_nothing_below_what_was_reached() -> None:
    api = MemoryPVCs(demo_pvcs("5Gi", "1Gi"))  # a new member's claim came from the 1Gi template
    workload = live("1Gi", **{ANNOTATION_SIZE: "5Gi"})
    claims, problem = await ensure_claims(api, cluster(storage={"size": "2Gi"}), workload)
    assert claims == Claims("1Gi", "5Gi") and problem is not None and problem[0] == "StorageShrinkRefused"
    assert api.patched == [("data-demo-1", "5Gi")]


async def test_ticks_without_write_and_new_clusters_touch_nothing() -> None:
    api = MemoryPVCs(demo_pvcs("1Gi"))
    assert await ensure_claims(api, cluster(storage={"size": "5Gi"}), live("1Gi"), write=False) \
        == (Claims("1Gi", "5Gi"), None)
    assert await ensure_claims(api, cluster(storage={"size": "5Gi"}), None) == (Claims("5Gi", "5Gi"), None)
    assert api.selectors == [] and api.patched == []


async def test_ephemeral_storage_has_no_claims() -> None:
    api = MemoryPVCs([])
    assert await ensure_claims(api, cluster(storage={"ephemeral": True}), live()) == (None, None)
    assert api.selectors == []
