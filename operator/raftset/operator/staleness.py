"""When a heartbeat goes stale unrenewed: one timer for every heartbeat Lease of every cluster.

A heartbeat is fresh until its Lease duration after the operator last saw it renewed
(raftset.operator.pure.freshness); the moment it goes stale, decisions change (a member is
missing, a step waits), so its cluster needs a round then. Each member renews every few seconds,
so that moment moves on with every renewal. Every cluster's own alarm waking at its first
member's expiry, to find it renewed and sleep again, was a wake-up per cluster every few seconds
(the per-cluster daemons took a quarter of the samples of a py-spy profile at rest with 1000
clusters, 2026-11-27). Here every renewal is one push on one
heap, and a cluster is rung only when one of its Leases really expires: its expiry comes with
no renewal after it.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable
from datetime import datetime, timezone

Key = tuple[str, str]  # (namespace, cluster)


class Staleness:
    """The expiry of each heartbeat Lease, by cluster; `run` rings a cluster when one passes."""

    def __init__(self, ring: Callable[[Key], None]) -> None:
        self._ring = ring
        self._expires: dict[tuple[Key, str], datetime] = {}
        # Every expiry pushed; one that a renewal replaced is dropped when it comes up.
        self._heap: list[tuple[datetime, Key, str]] = []
        self._sooner = asyncio.Event()

    def renewed(self, key: Key, lease: str, expires: datetime) -> None:
        """The Lease `lease` of `key`'s cluster is fresh until `expires` (the operator's clock)."""
        if self._expires.get((key, lease)) == expires:
            return
        self._expires[(key, lease)] = expires
        heapq.heappush(self._heap, (expires, key, lease))
        if self._heap[0][0] == expires:
            self._sooner.set()  # earlier than what the timer sleeps for

    def gone(self, key: Key, lease: str | None = None) -> None:
        """A Lease deleted, or (`lease` None) every Lease of a cluster that is gone."""
        for known in [k for k in self._expires if k[0] == key and (lease is None or k[1] == lease)]:
            del self._expires[known]

    def due(self, now: datetime) -> set[Key]:
        """The clusters with a Lease whose last expiry has passed by `now`, each Lease once."""
        stale = set()
        while self._heap and self._heap[0][0] <= now:
            moment, key, lease = heapq.heappop(self._heap)
            if self._expires.get((key, lease)) == moment:
                del self._expires[(key, lease)]
                stale.add(key)
        # Replaced expiries on top go now: the timer then sleeps until a live one.
        while self._heap and self._expires.get(self._heap[0][1:]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return stale

    def next_expiry(self) -> datetime | None:
        """The earliest expiry held (a live one, after `due`)."""
        return self._heap[0][0] if self._heap else None

    def pending(self) -> int:
        """Expiries held, replaced ones included (the heap's size): what a renewal storm leaves behind."""
        return len(self._heap)

    async def run(self) -> None:
        """Until cancelled: sleep until the next expiry (or a sooner one pushed), ring what is due."""
        while True:
            self._sooner.clear()
            moment = self.next_expiry()
            timeout = None if moment is None else max(0.0, (moment - _now()).total_seconds())
            try:
                await asyncio.wait_for(self._sooner.wait(), timeout)
            except TimeoutError:
                pass
            for key in self.due(_now()):
                self._ring(key)


def _now() -> datetime:
    return datetime.now(timezone.utc)
