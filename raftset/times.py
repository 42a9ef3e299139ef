"""Timestamps as status, conditions and our annotation records carry them (RFC 3339, UTC).

One writer and one reader, so every record compares the same way; the sidecar's Lease
`renewTime` (a MicroTime, microseconds) is the one other form, written by the sidecar.
"""

from __future__ import annotations

from datetime import datetime, timezone


def rfc3339(moment: datetime) -> str:
    """Whole seconds, UTC, `Z`: `2026-01-02T03:04:05Z`."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(raw: object) -> datetime | None:
    """A timestamp from the API or from a record (`Z` or an offset, fractions allowed), as an aware
    datetime; None when absent or unreadable: records anyone can write must not crash a decision."""
    if not isinstance(raw, str) or not raw:
        return None
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
