"""One backend's workloads (StatefulSets or Advanced StatefulSets) as the operator last heard them.

The round that finds nothing to do reads its workload from here, not from the apiserver (a scale
step still reads it fresh, raftset.operator.reconcile.plan). Each is filed under the cluster whose
object controls it, as `objects.cached` keeps it. A change rings that cluster: its controller moved
the status (pods ready, a revision rolled out), or someone else edited or deleted it (`drift`, by
`objects.edited_behind_our_back`: the next round re-applies everything). Plain data, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from raftset import contract
from raftset.operator.pure.books import Change, Grouped, Key, relisted, where
from raftset.operator.pure.objects import cached, edited_behind_our_back


def owner(obj: Mapping[str, Any]) -> Key | None:
    """The cluster whose object controls `obj`, if one does."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("apiVersion") == contract.API_VERSION and ref.get("controller"):
            return str(meta.get("namespace") or ""), str(ref["name"])
    return None


@dataclass
class WorkloadBook:
    """One backend's workloads by the cluster that controls each."""

    workloads: dict[Key, dict[str, dict[str, Any]]] = field(default_factory=dict)
    filed: dict[tuple[str, str], tuple[Key, str]] = field(default_factory=dict)  # (key, resourceVersion)

    def view(self) -> Grouped:
        return Grouped(self.workloads)

    def seen(self, obj: Mapping[str, Any], now: datetime) -> Change | None:
        """A workload listed, added or modified."""
        namespace, name = where(obj)
        key, before = owner(obj), self.filed.get((namespace, name))
        if key is None:
            return self.deleted(namespace, name) if before else None
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if before is not None and before[0] != key:
            self._drop((namespace, name))
        self.filed[(namespace, name)] = (key, version)
        self.workloads.setdefault(key, {})[name] = cached(obj)
        moved = before != (key, version)
        modified = moved and before is not None and before[0] == key
        return Change(key, name, ring=moved, drift=modified and edited_behind_our_back("MODIFIED", obj))

    def deleted(self, namespace: str, name: str) -> Change | None:
        filed = self.filed.get((namespace, name))
        if filed is None:
            return None
        self._drop((namespace, name))
        return Change(filed[0], name, ring=True, gone=True, drift=True)

    def listed(self, objs: Iterable[Mapping[str, Any]], namespace: str | None, now: datetime) -> list[Change]:
        return relisted(self, objs, list(self.filed), namespace, now)

    def forget(self, key: Key) -> None:
        for gone in [w for w, (k, _) in self.filed.items() if k == key]:
            self._drop(gone)
        self.workloads.pop(key, None)

    def _drop(self, filed: tuple[str, str]) -> None:
        key, _ = self.filed.pop(filed)
        self.workloads.get(key, {}).pop(filed[1], None)
