"""When a member is ready for clients: what `/readyz`, and so the pod's Ready condition, say.

Like etcd's own `/readyz` (3.6, its `linearizable_read` check), a member is ready only when a
linearizable read goes through it. Status alone can name a leader that cannot serve: a
minority still following a leader it lost, or an engine that came back from a crash unable to
commit (Xline after a lights-out that truncated its followers' logs, docs/engines.md). A
Service must not send clients to such a member, and the operator's view of the pod must say why.

A read going through is not enough on Xline: its leader answers a linearizable read, so the read
passes on a member that applies nothing (a member added by MemberAdd can stop applying:
docs/engines.md). So the member must also have applied what the cluster had committed a while ago:
its own revision (a serializable read's) at least the one a linearizable read reported `CATCH_UP_S`
earlier. etcd's linearizable read waits for the member's own apply, so there this never fires.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftset.sidecar.pure.etcd import Status

# Longer than the status poll's: a read waits for the leader's round trip to a quorum, and a
# busy disk can slow that for a moment without anything being wrong.
READ_TIMEOUT_S = 2.0
NOT_READ_YET = "no linearizable read has been tried since the member last became a voter with a leader"
# A member that has not applied what the cluster had committed this long ago is not ready: long
# enough that a follower catching up under load stays ready, short enough that clients leave a stuck one.
CATCH_UP_S = 30.0
_READ_FAILED, _BEHIND = "a linearizable read failed: ", "behind the cluster: "
_READ_REASONS = (_READ_FAILED, _BEHIND)  # the verdicts these reads decide, as opposed to Status's


@dataclass(frozen=True)
class Reading:
    at: float  # monotonic seconds
    revision: int  # the cluster's, as a linearizable read through the member reported it


def remember(readings: tuple[Reading, ...], new: Reading, window: float = CATCH_UP_S) -> tuple[Reading, ...]:
    """The readings `behind` may still need: the newest one at least `window` old, and all newer."""
    kept = readings + (new,)
    old = [i for i, r in enumerate(kept) if new.at - r.at >= window]
    return kept[old[-1]:] if old else kept


def behind(readings: tuple[Reading, ...], own_revision: int, now: float, window: float = CATCH_UP_S) -> str | None:
    """Why the member has not applied what the cluster had committed `window` ago; None when it has,
    or when no reading is that old yet."""
    due = [r for r in readings if now - r.at >= window]
    if not due or own_revision >= due[-1].revision:
        return None
    return (f"it has applied up to revision {own_revision}, and the cluster had reached revision "
            f"{due[-1].revision} {now - due[-1].at:.0f}s ago")


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reason: str  # empty when ready


def worth_a_read(phase: str, status: Status | None) -> bool:
    """Whether a read could make the member ready: everything else already says it would be."""
    return readiness(phase, status, None).ready


def announcement(before: Readiness, after: Readiness) -> tuple[bool, str] | None:
    """The log line (a warning?, its text) for a verdict these reads changed; None otherwise. Only
    their own verdicts count: Status's are the heartbeat's to show, and a member's first read after
    it became a voter is no recovery."""
    def decided_here(r: Readiness) -> bool:
        return r.reason.startswith(_READ_REASONS) and not r.reason.endswith(NOT_READ_YET)
    if decided_here(after) and after.reason != before.reason:
        return True, f"not ready: {after.reason}"
    if after.ready and decided_here(before):
        return False, "ready again: a linearizable read through this member succeeded, and it has applied what the cluster had committed"
    return None


def readiness(phase: str, status: Status | None, read_error: str | None, lag: str | None = None) -> Readiness:
    """`read_error` is None when the last linearizable read through this member succeeded; `lag` is
    `behind`'s verdict."""
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
        return Readiness(False, f"{_READ_FAILED}{read_error}")
    if lag is not None:
        return Readiness(False, f"{_BEHIND}{lag}")
    return Readiness(True, "")
