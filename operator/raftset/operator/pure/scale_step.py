"""The scale step record the operator writes on the workload, in the same apply as the step.

A restarted operator reads it to know which step it is waiting for and since when; the
step's `after_index` is the Raft membership record's index (raftset.membership) it was
planned on, so a record at least that new was read after the step's membership.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from raftset import records


SCALE_IN = "scale-in"
SCALE_OUT = "scale-out"


@dataclass(frozen=True)
class ScaleStep:
    """One scale step the operator took: which pod, which member, planned on which membership, when."""

    action: str  # SCALE_IN | SCALE_OUT
    pod: str  # the victim, or the pod added
    member_id: str  # the victim's member id when the step began; "" if it was no member
    after_index: int  # RaftMembership.index the step was planned on
    started: str  # RFC 3339 by the operator's clock; only the operator compares it

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def parse_step(raw: str | None) -> ScaleStep | None:
    """The step in the workload's annotation; None when absent or unreadable (raftset.records)."""
    step = records.parse(raw, lambda data: ScaleStep(
        action=str(data["action"]), pod=str(data["pod"]), member_id=str(data["member_id"]),
        after_index=int(data["after_index"]), started=str(data["started"])))
    return step if step is not None and step.action in (SCALE_IN, SCALE_OUT) else None
