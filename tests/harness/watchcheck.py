"""Watch guarantees, checked against the acknowledged writes of a history.

A watcher from revision `start` on the traffic's prefix must deliver, in revision order and
once each, exactly the writes the store made there: every acknowledged write from `start` up
to the horizon (the newest acknowledged revision, which the watcher is given time to reach),
with its value, and nothing no client wrote. A write whose outcome was unknown may show up or
not; when it does, its value must be one a client tried to write.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tests.harness.history import Op


@dataclass(frozen=True)
class Event:
    revision: int  # the event's mod revision
    key: str
    kind: Literal["put", "delete"]
    value: str = ""


def expected_events(ops: Sequence[Op], start: int, horizon: int) -> dict[tuple[int, str], Event]:
    """The events the acknowledged writes in [start, horizon] must produce, by (revision, key)."""
    expected = {}
    for op in ops:
        if op.acknowledged_write and start <= op.revision <= horizon:
            kind: Literal["put", "delete"] = "delete" if op.op == "delete" else "put"
            expected[(op.revision, op.key)] = Event(op.revision, op.key, kind, "" if kind == "delete" else op.value)
    return expected


def watch_problems(events: Sequence[Event], ops: Sequence[Op], start: int, horizon: int) -> list[str]:
    """What is wrong with one watcher's events: gaps, duplicates, disorder, wrong or invented values."""
    expected = expected_events(ops, start, horizon)
    maybe_values = {(op.key, op.value) for op in ops if op.op in ("put", "cas")}
    maybe_deleted = {op.key for op in ops if op.op == "delete" and (op.unknown or op.deleted > 0)}
    problems = []
    seen: set[tuple[int, str]] = set()
    previous = 0
    for n, event in enumerate(events):
        where = (event.revision, event.key)
        if event.revision < start:
            problems.append(f"event {n} at revision {event.revision} precedes the watch's start {start}")
        if event.revision < previous:
            problems.append(f"event {n} at revision {event.revision} ({event.key}) after revision {previous}: "
                            "out of order")
        previous = max(previous, event.revision)
        if where in seen:
            problems.append(f"event {n} at revision {event.revision} ({event.key}): duplicate")
            continue
        seen.add(where)
        want = expected.get(where)
        if want is not None and want != event:
            problems.append(f"event {n} at revision {event.revision}: {_describe(event)}, "
                            f"but the acknowledged write there was {_describe(want)}")
        elif want is None and event.kind == "put" and (event.key, event.value) not in maybe_values:
            problems.append(f"event {n} at revision {event.revision}: {_describe(event)}, which no client wrote")
        elif want is None and event.kind == "delete" and event.key not in maybe_deleted:
            problems.append(f"event {n} at revision {event.revision}: {_describe(event)}, which no client did")
    for where in sorted(set(expected) - seen):
        problems.append(f"gap: the acknowledged {_describe(expected[where])} at revision {where[0]} was never delivered")
    return problems


def settled(ops: Sequence[Op], delivered: Sequence[Event]) -> list[Op]:
    """`ops` without the writes a complete watch proves never took effect.

    `delivered` is one watch's events, without a gap, from the history's first revision through a
    write made after every other operation was called (the traffic's end mark). Values are unique,
    so a put or cas whose outcome is unknown and whose value the watch never delivered did not take
    effect before that mark; had it taken effect after, no operation in the history could have seen
    it. Leaving it out is exact, and spares porcupine trying it at every later point (etcd's
    robustness suite settles its failed writes with its watch the same way). A delete carries no
    value to look for: its outcome stays unknown.
    """
    written = {(event.key, event.value) for event in delivered if event.kind == "put"}
    return [op for op in ops if not (op.unknown and op.op in ("put", "cas") and (op.key, op.value) not in written)]


def _describe(event: Event) -> str:
    return f"delete of {event.key}" if event.kind == "delete" else f"put of {event.key}={event.value!r}"


def reordered(events: Sequence[Event]) -> list[Event]:
    """Doctoring: the first two adjacent events of different revisions swapped."""
    for n in range(len(events) - 1):
        if events[n].revision != events[n + 1].revision:
            return [*events[:n], events[n + 1], events[n], *events[n + 2:]]
    raise ValueError("fewer than two revisions among the events: nothing to reorder")


def dropped(events: Sequence[Event], index: int) -> list[Event]:
    """Doctoring: one event left out (a gap)."""
    return [*events[:index], *events[index + 1:]]


def duplicated(events: Sequence[Event], index: int) -> list[Event]:
    """Doctoring: one event delivered twice."""
    return [*events[:index + 1], dataclasses.replace(events[index]), *events[index + 1:]]
