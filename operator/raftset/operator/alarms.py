"""Each cluster's alarm: rung by the watch events that matter to it (and by a heartbeat going stale,
raftset.operator.staleness), set by every round to the next moment a decision changes on its own
(raftset.operator.pure.wakeup). What replaced the 5 s timer.

An alarm is a cache like the rest of `Runtime`: a restarted operator reconciles every cluster once
(kopf's resume handler) and each round sets the alarm again from what the API says.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from raftset.operator.pure.wakeup import Wake


class ClusterAlarm:
    """Rung (a round is due now) or set (a round is due at `wake.at`)."""

    def __init__(self) -> None:
        self.wake: Wake | None = None
        self._rung = False
        self._changed = asyncio.Event()

    def ring(self) -> None:
        self._rung = True
        self._changed.set()

    def set(self, wake: Wake) -> None:
        self.wake = wake
        self._changed.set()  # the sleeper measures its timeout again

    async def sleep(self) -> None:
        """Until rung, or until the wake-up time; a ring during a round is kept for the next sleep."""
        while not self._rung:
            self._changed.clear()
            wake = self.wake
            timeout = None if wake is None else max(0.0, (wake.at - _now()).total_seconds())
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except asyncio.TimeoutError:
                break
        self._rung = False


def _now() -> datetime:
    return datetime.now(timezone.utc)
