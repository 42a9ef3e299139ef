"""Which membership disagreements have lasted long enough to deserve a Warning Event.

`status.disagreements` names every difference between Raft, the workload and the heartbeats
at once, and most are a scale step or a replacement in flight: a new pod runs no member for a
few seconds, a departed member's Lease outlives it by one renewal. A Warning for each would
teach users to ignore Warnings. One that is still there after `grace` (the operator's
RAFTSET_STEP_STUCK_SECONDS, after which a step is called stuck) is not a step in flight
(a member removed by hand while its pod runs, a member in Raft no pod will ever serve): it gets
one Warning, once, until it goes away. First sightings live only in memory, as the heartbeat
sightings do: after an operator restart a lasting disagreement is announced once more, `grace`
later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from raftset.operator.pure.events import Event

REASON = "MembershipDisagreement"


@dataclass(frozen=True)
class Seen:
    since: datetime  # when this operator first saw the disagreement, on its own clock
    announced: bool = False


def track(seen: Mapping[str, Seen], current: Sequence[str], now: datetime,
          grace: timedelta) -> tuple[dict[str, Seen], list[str]]:
    """(what to remember, which disagreements to announce now): those `current` for `grace`."""
    remembered = {text: seen.get(text) or Seen(since=now) for text in current}
    due = [text for text, s in remembered.items() if not s.announced and now - s.since >= grace]
    for text in due:
        remembered[text] = replace(remembered[text], announced=True)
    return remembered, due


def event(text: str, lasted: timedelta) -> Event:
    """The Warning for one disagreement that has lasted `lasted`."""
    return Event("Warning", REASON, f"for {int(lasted.total_seconds())} s: {text}")
