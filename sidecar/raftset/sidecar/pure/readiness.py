"""When a member is ready for clients: what `/readyz`, and so the pod's Ready condition, say.

Like etcd's own `/readyz` (3.6, its `linearizable_read` check), a member is ready only when a
linearizable read goes through it. Status alone can name a leader that cannot serve: a
minority still following a leader it lost, or an engine that came back from a crash unable to
commit (Xline after a lights-out that truncated its followers' logs, docs/engines.md). A
Service must not send clients to such a member, and the operator's view of the pod must say why.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftset.sidecar.pure.etcd import Status

# What readiness reads, linearizably; nothing writes it, so on Xline no write conflicts with it.
READ_KEY = "/raftset.io/readiness"
# Longer than the status poll's: a read waits for the leader's round trip to a quorum, and a
# busy disk can slow that for a moment without anything being wrong.
READ_TIMEOUT_S = 2.0
NOT_READ_YET = "no linearizable read has been tried since the member last became a voter with a leader"


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reason: str  # empty when ready


def worth_a_read(phase: str, status: Status | None) -> bool:
    """Whether a read could make the member ready: everything else already says it would be."""
    return readiness(phase, status, None).ready


def readiness(phase: str, status: Status | None, read_error: str | None) -> Readiness:
    """`read_error` is None when the last linearizable read through this member succeeded."""
    if phase != "started":
        return Readiness(False, f"the sidecar is {phase}")
    if status is None:
        return Readiness(False, "the store does not answer Status")
    if status.is_learner:
        return Readiness(False, "a learner, not a voter yet")
    if status.leader == 0:
        return Readiness(False, "no leader")
    if status.errors:
        return Readiness(False, "the store reports: " + "; ".join(status.errors))
    if read_error is not None:
        return Readiness(False, f"a linearizable read failed: {read_error}")
    return Readiness(True, "")
