"""How much of a member's volume the store may fill: the backend quota and auto-compaction.

The quota is set deliberately from the volume, not left at the engine's default (etcd: 2 GiB,
Xline: 8 GiB, either of which a small volume cannot hold). The volume must hold, at once:

* the backend file up to its quota;
* a second copy of the data while a defragmentation rewrites the file (bbolt writes the new
  file beside the old one before it swaps them);
* the WAL and the snapshots (etcd keeps 5 WAL segments of 64 MiB and 5 snapshots).

So quota = (volume - HEADROOM) / 2, capped at MAX_QUOTA (etcd's largest recommended quota).
The default volume (fields.py: 5Gi) gives 2.25 GiB, a little above etcd's own default.
Auto-compaction keeps an hour of history (periodic), so that free pages appear on their
own and a defragmentation has something to give back. Both are plain options: a value in
`spec.options` wins, and a quota the volume cannot hold twice is refused with the size it needs.
"""

from __future__ import annotations

from decimal import Decimal

from raftset.operator.pure.quantity import parse_quantity

from raftset.engines import Engine

MIB = 1024**2
HEADROOM = 512 * MIB
MAX_QUOTA = 8 * 1024**3
MIN_QUOTA = 64 * MIB
RETENTION_MINUTES = 60


def quota_for(size: str) -> int:
    """The backend quota a volume of `size` holds with room for a defragmentation, in whole MiB."""
    volume = int(parse_quantity(size))
    quota = (volume - HEADROOM) // 2
    return max(MIN_QUOTA, min(MAX_QUOTA, quota // MIB * MIB))


def volume_needed(quota: int) -> int:
    """The smallest volume that holds `quota` twice plus the headroom."""
    return 2 * quota + HEADROOM


def defaults(engine: Engine, size: str) -> dict[str, str]:
    """The options the operator adds to spec.options (which wins) for a volume of `size`."""
    return engine.space_options(quota_for(size), RETENTION_MINUTES)


def refusal(engine: Engine, size: str, options: dict[str, str], *, ephemeral: bool) -> str | None:
    """Why the quota in spec.options does not fit the volume, or None."""
    if ephemeral or engine.quota_option not in options:
        return None
    raw = options[engine.quota_option]
    try:
        quota = int(Decimal(raw))
    except ArithmeticError:
        return f"spec.options {engine.quota_option} must be a number of bytes, got {raw!r}"
    needed = volume_needed(quota)
    if int(parse_quantity(size)) < needed:
        return (f"spec.options {engine.quota_option}={quota} needs a volume of at least {needed // MIB}Mi "
                f"(twice the quota, for a defragmentation's copy, plus {HEADROOM // MIB}Mi for the WAL and "
                f"snapshots); spec.storage.size is {size}")
    return None
