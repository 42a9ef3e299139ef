"""What the operator's own watches keep (raftset.operator.io.objectwatch): the shape every book shares.

A book files the objects of one resource by the cluster they belong to, as plain data, and says
for each event which cluster needs a round (`Change`). The rounds read a book through `Grouped`
views, a cluster's values as a list. A book is only a cache: a restart lists everything again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

Key = tuple[str, str]  # (namespace, cluster)


@dataclass(frozen=True)
class Change:
    """What one event or list changed for a cluster."""

    key: Key
    name: str  # the object's
    ring: bool  # the cluster needs a round now
    expires: datetime | None = None  # a heartbeat's expiry (the staleness timer's), None otherwise
    gone: bool = False
    drift: bool = False  # an owned object edited or deleted behind our back: the next round re-applies all


class Book(Protocol):
    def seen(self, obj: Mapping[str, Any], now: datetime) -> Change | None: ...

    def deleted(self, namespace: str, name: str) -> Change | None: ...

    def listed(self, objs: Iterable[Mapping[str, Any]], namespace: str | None, now: datetime) -> list[Change]: ...


class Grouped(Mapping[Key, list[Any]]):
    """A cluster's values of one kind as a list, the way a kopf index's store reads."""

    def __init__(self, by_key: Mapping[Key, Mapping[str, Any]]) -> None:
        self._by_key = by_key

    def __getitem__(self, key: Key) -> list[Any]:
        found = self._by_key.get(key)
        if not found:
            raise KeyError(key)
        return list(found.values())

    def __iter__(self) -> Iterator[Key]:
        return (key for key, values in self._by_key.items() if values)

    def __len__(self) -> int:
        return sum(1 for values in self._by_key.values() if values)


def where(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of an object."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def relisted(book: Book, objs: Iterable[Mapping[str, Any]], filed: Iterable[tuple[str, str]],
             namespace: str | None, now: datetime) -> list[Change]:
    """A fresh list (of `namespace`, or of every one for None): each object seen, and every one filed
    there that the list no longer holds deleted (a watch gap hid its deletion)."""
    changes: list[Change] = []
    listed = set()
    for obj in objs:
        listed.add(where(obj))
        change = book.seen(obj, now)
        if change is not None:
            changes.append(change)
    for gone in [w for w in filed if (namespace is None or w[0] == namespace) and w not in listed]:
        change = book.deleted(*gone)
        if change is not None:
            changes.append(change)
    return changes
