"""The clusters' member pods as the operator last heard them: what the rounds read of them.

A round reads three things of its pods without asking the apiserver: which pod carries the sidecar's
scale-away mark, which pods ask for their member to be replaced (with the sidecar's record of
each step, raftset.sidecar.pure.replace), and which pods on a node are not Ready or carry the
node-loss records (raftset.nodeloss): only those make a round read nodes. Every other change of a member pod (it started, became
ready, is terminating) only rings its cluster: the round that needs the pods lists them then.
Only these few fields are kept, not the pods. Plain data, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from raftset import contract, replace
from raftset.operator.pure.books import Change, Grouped, Key, relisted, where
from raftset.operator.pure.nodeloss import refused_by_scheduler


@dataclass
class PodBook:
    """Every member pod the operator watches, by cluster and pod name."""

    marks: dict[Key, dict[str, str]] = field(default_factory=dict)  # the scale-away marked pods' names
    replacements: dict[Key, dict[str, dict[str, Any]]] = field(default_factory=dict)  # {pod, requested, progress}
    unready: dict[Key, dict[str, str]] = field(default_factory=dict)  # placed pods not Ready, or in a node loss
    # Where each pod is filed, and the resourceVersion last heard: a relist of an unchanged pod rings nothing.
    filed: dict[tuple[str, str], tuple[Key, str]] = field(default_factory=dict)

    def views(self) -> tuple[Grouped, Grouped, Grouped]:
        """The scale-away marks, the replacement requests and the unready pods as the rounds read them."""
        return Grouped(self.marks), Grouped(self.replacements), Grouped(self.unready)

    def seen(self, pod: Mapping[str, Any], now: datetime) -> Change | None:
        """A pod listed, added or modified."""
        meta = pod.get("metadata") or {}
        namespace, name = where(pod)
        cluster = (meta.get("labels") or {}).get(contract.LABEL_INSTANCE)
        before = self.filed.get((namespace, name))
        if not cluster:
            return self.deleted(namespace, name) if before else None
        key, version = (namespace, cluster), str(meta.get("resourceVersion") or "")
        if before is not None and before[0] != key:
            self._drop((namespace, name))  # relabelled: filed anew below
        self.filed[(namespace, name)] = (key, version)
        annotations = meta.get("annotations") or {}
        if contract.ANNOTATION_SCALE_AWAY in annotations:
            self.marks.setdefault(key, {})[name] = name
        else:
            self.marks.get(key, {}).pop(name, None)
        if contract.ANNOTATION_REPLACE in annotations or contract.ANNOTATION_REPLACE_PROGRESS in annotations:
            self.replacements.setdefault(key, {})[name] = {
                "pod": name, "requested": replace.requested(annotations),
                "progress": annotations.get(contract.ANNOTATION_REPLACE_PROGRESS)}
        else:
            self.replacements.get(key, {}).pop(name, None)
        if _unready(pod) or contract.ANNOTATION_NODE_LOST in annotations \
                or contract.ANNOTATION_NODE_LOST_REMOVAL in annotations:
            self.unready.setdefault(key, {})[name] = name
        else:
            self.unready.get(key, {}).pop(name, None)
        return Change(key, name, ring=before != (key, version))

    def deleted(self, namespace: str, name: str) -> Change | None:
        filed = self.filed.get((namespace, name))
        if filed is None:
            return None
        self._drop((namespace, name))
        return Change(filed[0], name, ring=True, gone=True)

    def listed(self, pods: Iterable[Mapping[str, Any]], namespace: str | None, now: datetime) -> list[Change]:
        return relisted(self, pods, list(self.filed), namespace, now)

    def forget(self, key: Key) -> None:
        """A cluster gone: everything filed for it."""
        for gone in [w for w, (k, _) in self.filed.items() if k == key]:
            self._drop(gone)
        self.marks.pop(key, None)
        self.replacements.pop(key, None)
        self.unready.pop(key, None)

    def _drop(self, filed: tuple[str, str]) -> None:
        key, _ = self.filed.pop(filed)
        self.marks.get(key, {}).pop(filed[1], None)
        self.replacements.get(key, {}).pop(filed[1], None)
        self.unready.get(key, {}).pop(filed[1], None)


def _unready(pod: Mapping[str, Any]) -> bool:
    """Placed on a node and its Ready condition not True, or refused by the scheduler (its volume may be
    pinned to a node whose object was deleted: raftset.operator.pure.nodeloss)."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return refused_by_scheduler(pod)
    conditions = (pod.get("status") or {}).get("conditions") or []
    return not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
