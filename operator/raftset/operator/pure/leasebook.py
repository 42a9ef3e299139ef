"""The clusters' Leases as the operator last heard them: heartbeats, membership and backup records.

Heartbeat renewals are the most frequent thing the operator hears: every member renews every few
seconds, at rest as much as in motion. They reach the operator through one watch of its own
(raftset.operator.io.objectwatch), not kopf's: in a py-spy profile of the operator at rest with 1000
clusters (2026-11-27), kopf's per-event machinery and its diff base took about half the samples,
and at rest nearly every event is a renewal. This book is what the
rounds read instead of kopf's indices, with the same values: a heartbeat as its trimmed Lease with
the operator's sighting (raftset.operator.pure.freshness), the membership record's raw annotation,
the backup Lease's annotations.

Each change says which cluster, if any, needs a round now (`Heard`): a heartbeat only when it says
something new (raftset.operator.pure.wakeup.lease_wakes), a membership record when who is a member
or leads changes (wakeup.membership_wakes: the leader also refreshes it every heartbeat interval), a
backup record on every change (it is written on a change only), a Lease gone always. A heartbeat's `expires` feeds the
staleness timer (raftset.operator.staleness). Plain data, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from raftset import contract
from raftset.operator.pure import freshness, wakeup
from raftset.operator.pure.books import Change, Grouped, Key, relisted
from raftset.operator.pure.heartbeats import LEASE, SIGHTING, expiry

HEARTBEAT, MEMBERSHIP, BACKUP = "heartbeat", "membership", "backup"


def kind_of(labels: Mapping[str, str]) -> str | None:
    """Which record a Lease with these labels holds; None for a Lease of no interest."""
    for label, kind in ((contract.LABEL_HEARTBEAT, HEARTBEAT), (contract.LABEL_MEMBERSHIP, MEMBERSHIP),
                        (contract.LABEL_BACKUP, BACKUP)):
        if labels.get(label) == "true":
            return kind
    return None


@dataclass
class LeaseBook:
    """Every cluster Lease the operator watches, by cluster and Lease name."""

    heartbeats: dict[Key, dict[str, dict[str, Any]]] = field(default_factory=dict)  # {LEASE, SIGHTING}
    memberships: dict[Key, dict[str, str]] = field(default_factory=dict)  # the raw membership record
    backups: dict[Key, dict[str, dict[str, str]]] = field(default_factory=dict)  # the Lease's annotations
    heard: dict[Key, dict[str, wakeup.Heard]] = field(default_factory=dict)
    # Where each Lease (namespace, name) is filed, so that a deletion finds it.
    filed: dict[tuple[str, str], tuple[Key, str]] = field(default_factory=dict)

    def views(self) -> tuple[Grouped, Grouped, Grouped]:
        """The heartbeats, membership records and backup records as the rounds read them."""
        return Grouped(self.heartbeats), Grouped(self.memberships), Grouped(self.backups)

    def seen(self, lease: Mapping[str, Any], now: datetime) -> Change | None:
        """A Lease listed, added or modified at `now` (the operator's clock)."""
        meta = lease.get("metadata") or {}
        labels = meta.get("labels") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        cluster, kind = labels.get(contract.LABEL_INSTANCE), kind_of(labels)
        where = (namespace, name)
        moved = self.filed.get(where)
        if not cluster or kind is None:
            return self.deleted(namespace, name) if moved else None
        key = (namespace, cluster)
        if moved is not None and moved != (key, kind):
            self._drop(where)  # relabelled: filed anew below
        self.filed[where] = (key, kind)
        annotations = dict(meta.get("annotations") or {})
        if kind == MEMBERSHIP:
            raw = annotations.get(contract.ANNOTATION_MEMBERSHIP)
            records = self.memberships.setdefault(key, {})
            before = records.get(name)
            if raw:
                records[name] = raw
            else:
                records.pop(name, None)
            return Change(key, name, ring=wakeup.membership_wakes(before, raw or None))
        if kind == BACKUP:
            self.backups.setdefault(key, {})[name] = annotations
            return Change(key, name, ring=True)
        trimmed = {"metadata": {"annotations": annotations, "resourceVersion": meta.get("resourceVersion")},
                   "spec": dict(lease.get("spec") or {})}
        entries = self.heartbeats.setdefault(key, {})
        before_entry = entries.get(name)
        sighting = freshness.observe(before_entry[SIGHTING] if before_entry else None,
                                     freshness.token(trimmed), now)
        entries[name] = {LEASE: trimmed, SIGHTING: sighting}
        heard = self.heard.setdefault(key, {})
        before, heard[name] = heard.get(name), wakeup.Heard(wakeup.lease_view(trimmed), sighting)
        return Change(key, name, ring=wakeup.lease_wakes(before, heard[name], now),
                      expires=expiry(trimmed, sighting))

    def deleted(self, namespace: str, name: str) -> Change | None:
        """A Lease deleted: its cluster reads one record fewer."""
        filed = self.filed.get((namespace, name))
        if filed is None:
            return None
        self._drop((namespace, name))
        return Change(filed[0], name, ring=True, gone=True)

    def listed(self, leases: Iterable[Mapping[str, Any]], namespace: str | None, now: datetime) -> list[Change]:
        """A fresh list of the Leases (of `namespace`, or of every one for None)."""
        return relisted(self, leases, list(self.filed), namespace, now)

    def forget(self, key: Key) -> None:
        """A cluster gone: everything filed for it."""
        for where in [w for w, (k, _) in self.filed.items() if k == key]:
            self._drop(where)
        for books in (self.heartbeats, self.memberships, self.backups, self.heard):
            books.pop(key, None)

    def _drop(self, where: tuple[str, str]) -> None:
        key, kind = self.filed.pop(where)
        name = where[1]
        if kind == HEARTBEAT:
            self.heartbeats.get(key, {}).pop(name, None)
            self.heard.get(key, {}).pop(name, None)
        elif kind == MEMBERSHIP:
            self.memberships.get(key, {}).pop(name, None)
        else:
            self.backups.get(key, {}).pop(name, None)
