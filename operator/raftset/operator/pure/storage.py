"""Volume expansion: `spec.storage.size` grows, the members' PVCs follow.

A StatefulSet's `volumeClaimTemplates` cannot change once created, so the workload keeps
rendering the size it was created with (read back from the live object) and the operator
patches each PVC instead; the storage driver does the rest when its StorageClass has
`allowVolumeExpansion: true`. What was done is recorded in two workload annotations, so
every reconcile (not only the ones that write) reports the same condition:

* `raftset.dev/storage-size`: the size every member PVC has been asked for;
* `raftset.dev/storage-expansion-failed`: a size the apiserver refused to expand to.

Shrinking is refused: no storage driver can shrink a volume in place.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from raftset.operator.pure.quantity import parse_quantity

from raftset import contract

ANNOTATION_SIZE = f"{contract.GROUP}/storage-size"
ANNOTATION_FAILED = f"{contract.GROUP}/storage-expansion-failed"
CLAIM_TEMPLATE = "data"  # the volumeClaimTemplate's name, also the PVCs' prefix

Problem = tuple[str, str]


@dataclass(frozen=True)
class Claims:
    """What the renderer writes about storage on the workload."""

    template_size: str  # volumeClaimTemplates: the size the workload was created with
    size: str  # what every member PVC is asked for
    failed: str | None = None  # a size the apiserver refused to expand to

    def annotations(self) -> dict[str, str]:
        out = {ANNOTATION_SIZE: self.size}
        if self.failed:
            out[ANNOTATION_FAILED] = self.failed
        return out


def quantity(value: str) -> Decimal:
    return parse_quantity(value)


def template_size(workload: Mapping[str, Any] | None) -> str | None:
    """The storage request of the live workload's data claim template, if it has one."""
    for claim in ((workload or {}).get("spec") or {}).get("volumeClaimTemplates") or []:
        if (claim.get("metadata") or {}).get("name") == CLAIM_TEMPLATE:
            return ((claim.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
    return None


def _expansion_failed(current: str, wanted: str) -> Problem:
    return ("StorageExpansionFailed",
            f"the member volumes could not be expanded from {current} to {wanted}: their "
            f"StorageClass must set allowVolumeExpansion: true and the claims must be bound; "
            f"the operator retries on every resync (see its log for the apiserver's answer)")


def _annotations(workload: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((workload or {}).get("metadata") or {}).get("annotations") or {}


def recorded_size(workload: Mapping[str, Any] | None, desired: str) -> str:
    """What the member PVCs were last asked for (the template's size before any expansion)."""
    return _annotations(workload).get(ANNOTATION_SIZE) or template_size(workload) or desired


def decide(desired: str, workload: Mapping[str, Any] | None) -> tuple[Claims, Problem | None]:
    """What to render, and the problem to report, from the spec and the live workload."""
    created = template_size(workload) or desired
    recorded = recorded_size(workload, desired)
    failed = _annotations(workload).get(ANNOTATION_FAILED)
    if quantity(desired) < quantity(recorded):
        return Claims(created, recorded), (
            "StorageShrinkRefused",
            f"spec.storage.size {desired} is smaller than the {recorded} the member volumes "
            f"already have; volumes cannot shrink: set it back to {recorded} or more")
    if failed and quantity(failed) == quantity(desired) and quantity(desired) > quantity(recorded):
        return Claims(created, recorded, failed), _expansion_failed(recorded, desired)
    return Claims(created, desired), None


_CLAIM_NAME = re.compile(r"^(?P<cluster>.+)-(?P<ordinal>\d+)$")


def member_claim(cluster: str, pvc_name: str) -> bool:
    """Is this PVC one the workload made for a member (`data-<cluster>-<ordinal>`)?"""
    prefix = f"{CLAIM_TEMPLATE}-"
    match = _CLAIM_NAME.match(pvc_name[len(prefix):]) if pvc_name.startswith(prefix) else None
    return bool(match and match["cluster"] == cluster)


def to_expand(cluster: str, pvcs: Iterable[Mapping[str, Any]], size: str) -> list[str]:
    """The member PVCs asking for less than `size`, by name; larger ones are left alone."""
    wanted = quantity(size)
    out = []
    for pvc in pvcs:
        name = (pvc.get("metadata") or {}).get("name", "")
        requested = ((pvc.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
        if member_claim(cluster, name) and requested and quantity(requested) < wanted:
            out.append(name)
    return sorted(out)


def expanded(template: str, recorded: str, desired: str, failure: bool) -> tuple[Claims, Problem | None]:
    """The outcome of patching the PVCs from `recorded` up to `desired` (once `decide` accepted it)."""
    if failure:
        return Claims(template, recorded, desired), _expansion_failed(recorded, desired)
    return Claims(template, desired), None
