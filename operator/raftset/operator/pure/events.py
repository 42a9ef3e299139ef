"""What the operator tells about a cluster: an Event on the cluster object, a condition in its status.

Every producer (the plan's step, the status's changes, a lasting disagreement, the quorum-loss
decision, a replace step, a backup request) speaks in these two types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class Event(NamedTuple):
    """An Event to post on the cluster object (a tuple, so a test may still compare it to one)."""

    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool | None  # None: Unknown, the operator cannot tell (QuorumLost while no heartbeat is fresh)
    reason: str
    message: str
