"""Which of the store's copies in its scratch volume were abandoned, and may go.

Xline writes every snapshot it takes into a new `/tmp/snapshot-<uuid>` (a full copy of its
database) and removes none; after a scale-in its leader takes one for the removed member many
times a second (docs/engines.md, "Snapshot copies left in /tmp"). A copy is written once, then
read from its start: a send or a Maintenance.Snapshot stream opens its files within moments, and
an open file outlives its removal. So a copy none of whose files changed for a minute is no
longer anyone's to open, and removing it loses nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

SWEEP_INTERVAL_S = 10.0
ABANDONED_AFTER_S = 60.0


@dataclass(frozen=True)
class Copy:
    name: str  # the entry's name in the scratch directory
    changed: float  # the newest modification time of it and anything in it (seconds since the epoch)
    size: int  # bytes


def abandoned(entries: Iterable[Copy], prefix: str, now: float, after: float = ABANDONED_AFTER_S) -> list[Copy]:
    """The store's copies (named `prefix`...) unchanged for `after` seconds; nothing else in the
    directory is the sidecar's to judge."""
    return sorted((e for e in entries if e.name.startswith(prefix) and now - e.changed >= after),
                  key=lambda e: e.name)
