"""The two workload backends: builtin StatefulSet and OpenKruise Advanced StatefulSet.

They share one pod template; they differ only in the API they live in and in how a
scale-in chooses its victims (builtin: always the highest ordinals; Advanced: any
ordinals listed in `spec.reserveOrdinals`). Both the operator (to plan) and the sidecar
(to decide "am I being scaled away or only restarted?") read that difference here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Set on every pod by the StatefulSet controller and by OpenKruise's Advanced StatefulSet alike
# (the PodDisruptionBudget leaves a scale-in's victim out by it).
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"


def being_deleted(obj: Mapping[str, Any] | None) -> bool:
    """Has the API object a deletionTimestamp (a terminating pod, a workload going with its cluster)?"""
    return bool(((obj or {}).get("metadata") or {}).get("deletionTimestamp"))


def kept_ordinals(replicas: int, reserved: Iterable[int] = ()) -> list[int]:
    """The ordinals a StatefulSet with `replicas` pods and `reserved` ordinals runs, ascending.

    With nothing reserved this is 0..replicas-1 (builtin semantics); Advanced StatefulSet
    skips every reserved ordinal and fills the next free one instead.
    """
    skipped = set(reserved)
    kept: list[int] = []
    ordinal = 0
    while len(kept) < replicas:
        if ordinal not in skipped:
            kept.append(ordinal)
        ordinal += 1
    return kept


@dataclass(frozen=True)
class Backend:
    """One workload API the operator can render and the sidecar can read."""

    name: str  # the value of spec.workloadKind
    group: str
    version: str
    kind: str
    plural: str
    supports_reserved_ordinals: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def reserved(self, workload: Mapping[str, Any]) -> list[int]:
        if not self.supports_reserved_ordinals:
            return []
        raw = (workload.get("spec") or {}).get("reserveOrdinals") or []
        # Kruise also accepts "a-b" ranges given as strings; integers are what we write.
        out: list[int] = []
        for item in raw:
            if isinstance(item, int):
                out.append(item)
            elif isinstance(item, str) and "-" in item:
                lo, hi = item.split("-", 1)
                out.extend(range(int(lo), int(hi) + 1))
            else:
                out.append(int(item))
        return sorted(set(out))

    def honoured(self, reserved: Iterable[int]) -> tuple[int, ...]:
        """The reservations this API honours: none on the builtin StatefulSet."""
        return tuple(sorted(set(reserved))) if self.supports_reserved_ordinals else ()

    def removable(self, kept: list[int]) -> list[int]:
        """The running ordinals a scale-in step may delete.

        The builtin StatefulSet always deletes its highest ordinal; Advanced StatefulSet
        deletes whichever ordinal is reserved.
        """
        return list(kept) if self.supports_reserved_ordinals else kept[-1:]

    def scale(self, workload: Mapping[str, Any]) -> tuple[int, list[int]]:
        """The workload object's current (replicas, reserved ordinals); replicas default to 1 as in the API."""
        return int((workload.get("spec") or {}).get("replicas", 1)), self.reserved(workload)

    def kept(self, workload: Mapping[str, Any]) -> list[int]:
        """The ordinals the workload object currently wants to run."""
        return kept_ordinals(*self.scale(workload))

    def scale_spec(self, replicas: int, reserved: Iterable[int]) -> dict[str, Any]:
        """The part of `spec` that a scale step writes."""
        spec: dict[str, Any] = {"replicas": replicas}
        if self.supports_reserved_ordinals:
            spec["reserveOrdinals"] = sorted(set(reserved))
        return spec


STATEFULSET = Backend(
    name="StatefulSet", group="apps", version="v1", kind="StatefulSet",
    plural="statefulsets", supports_reserved_ordinals=False,
)
ADVANCED_STATEFULSET = Backend(
    name="AdvancedStatefulSet", group="apps.kruise.io", version="v1beta1", kind="StatefulSet",
    plural="statefulsets", supports_reserved_ordinals=True,
)
BACKENDS: dict[str, Backend] = {b.name: b for b in (STATEFULSET, ADVANCED_STATEFULSET)}
