"""In which order the operator's API calls go: a spec change's first, then a new cluster's, then the rest.

Calls in flight are bounded (raftset.operator.io.kube.CONNECTIONS, the client's connection pool), so a
burst of reconciles (the create handlers of a few hundred new clusters, an operator restart, a thousand
re-applies) still queues thousands of calls. In first-in-first-out order each of the eight sequential
applies of a spec change went to the back of that queue again: with the former six-thread pool, at
1000 clusters a spec change had not reached its StatefulSet 30 s later, while reconciles took 220 s on
average. `Gate` lets at most `width` calls run at once and hands a free slot to the waiting call of the
most urgent reconcile, and among equals to the reconcile that began first: a spec change's calls wait
only for calls already running, never for the queue, and a burst of reconciles of one urgency finishes
in the order it began instead of advancing all together.

`Turns` keeps one cluster's reconciles one at a time. A reconcile that has to wait for the cluster lends
its urgency to the one running (priority inheritance): otherwise a spec change waits for a background
reconcile that began just before it, and that reconcile's calls wait behind a burst of new clusters;
at 1000 clusters that kept a spec change from its StatefulSet for more than 30 s.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

SPEC_CHANGE, CREATION, BACKGROUND = 0, 1, 2  # urgency: lower goes first

_sequence = itertools.count(1)


@dataclass(eq=False)
class Lane:
    """One reconcile's place in the order: its urgency, which a more urgent reconcile waiting for the
    same cluster may raise, and when it began, which orders reconciles of equal urgency."""

    urgency: int
    began: int = field(default_factory=lambda: next(_sequence))

    @property
    def order(self) -> tuple[int, int]:
        return self.urgency, self.began


# The lane of the reconcile running in this task (kopf runs each handler in its own task); calls made
# outside any reconcile (startup, the backup handlers) go last.
CURRENT: contextvars.ContextVar[Lane] = contextvars.ContextVar("raftset_api_lane", default=Lane(BACKGROUND, 0))


def urgency_of(given: int, generation: int, observed: int | None) -> int:
    """A reconcile's urgency from what the object shows, whoever runs it: a spec no reconcile has
    observed yet is a new cluster's (no observed generation) or a spec change's, even when the
    cluster's loop takes the lock before kopf's change handler does."""
    if observed is None:
        return min(given, CREATION)
    if observed < generation:
        return SPEC_CHANGE
    return given


class Gate:
    """At most `width` calls at once; a freed slot goes to the waiting call whose lane is first."""

    def __init__(self, width: int) -> None:
        self._free = width
        # (urgency, began, arrival, lane, turn): arrival breaks ties within one reconcile (concurrent calls)
        self._waiting: list[tuple[int, int, int, Lane, asyncio.Future[None]]] = []
        self._arrival = itertools.count()

    @asynccontextmanager
    async def slot(self, lane: Lane) -> AsyncIterator[None]:
        if self._free > 0 and not self._waiting:
            self._free -= 1
        else:
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiting, (*lane.order, next(self._arrival), lane, turn))
            try:
                await turn
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():
                    self._release()  # the slot was handed over just before the cancellation
                else:
                    self._waiting = [entry for entry in self._waiting if entry[4] is not turn]
                    heapq.heapify(self._waiting)
                raise
        try:
            yield
        finally:
            self._release()

    def reorder(self) -> None:
        """Sort the waiting calls again after a lane's urgency was raised."""
        self._waiting = [(*lane.order, arrival, lane, turn) for _, _, arrival, lane, turn in self._waiting]
        heapq.heapify(self._waiting)

    def _release(self) -> None:
        while self._waiting:
            turn = heapq.heappop(self._waiting)[4]
            if not turn.done():
                turn.set_result(None)
                return
        self._free += 1


class Turns:
    """One cluster's reconciles, one at a time; a waiting reconcile lends its urgency to the running one."""

    def __init__(self, gate: Gate) -> None:
        self._gate = gate
        self._lock = asyncio.Lock()
        self._running: Lane | None = None
        self._waiting: list[int] = []  # the urgencies of the reconciles waiting for the lock

    @asynccontextmanager
    async def take(self, urgency: int) -> AsyncIterator[Lane]:
        """The cluster's turn; the calls made in it go in its lane (`CURRENT`)."""
        self._waiting.append(urgency)
        try:
            if self._running is not None and urgency < self._running.urgency:
                self._running.urgency = urgency
                self._gate.reorder()
            await self._lock.acquire()
        finally:
            self._waiting.remove(urgency)
        lane = Lane(min([urgency, *self._waiting]))  # a reconcile still waiting has lent its urgency
        self._running = lane
        token = CURRENT.set(lane)
        try:
            yield lane
        finally:
            CURRENT.reset(token)
            self._running = None
            self._lock.release()
