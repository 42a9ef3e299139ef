"""The promote loop's pace, pure: how soon a joining member's sidecar looks at its store again.

A learner adds load to the leader without counting for quorum, and the operator's next scale
step waits for it to vote, so the sidecar asks for the promotion as soon as etcd would say yes:
it polls its own store every `POLL_S` until the store answers as a voter (not at the heartbeat's
poll interval), and a promotion etcd refuses as "not in sync yet" (an expected answer, not a
failed change: nothing was changed) is asked again after a backoff from `POLL_S` up to
`REFUSED_CAP_S`. Measured on the scale-out benchmark: with a 0.25 s poll the promotion came on
average 0.2 s after the learner's store first answered, in joins of about 1 s.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftset.sidecar.pure.backoff import Backoff
from raftset.sidecar.pure.etcd import Status

POLL_S = 0.1  # while the store does not answer yet, or answers as a learner
REFUSED_CAP_S = 1.0  # the longest wait before asking again after "not in sync"
VOTER_CAP_S = 1.0  # once voting: the loop only watches for a later demotion (a rejoin), slower


@dataclass(frozen=True)
class Wait:
    """Look again in `seconds`; `voting`: the store answers as a voter, so earlier refusals no longer count."""

    seconds: float
    voting: bool = False


@dataclass(frozen=True)
class AskToVote:
    """The store answers as a learner: ask for its promotion now."""

    learner: Status


def polling(phase: str, status: Status | None) -> bool:
    """Whether this round polls the store itself (at the promote pace, not the heartbeat's)."""
    return phase == "started" and (status is None or status.is_learner)


def next_round(phase: str, status: Status | None, poll_interval: float) -> Wait | AskToVote:
    """What the promote loop does after this round's look at its store."""
    if phase != "started":
        return Wait(poll_interval)  # joining or leaving: nothing to promote
    if status is None:
        return Wait(POLL_S)  # the store does not answer yet (starting, or receiving its snapshot)
    if not status.is_learner:
        return Wait(min(poll_interval, VOTER_CAP_S), voting=True)
    return AskToVote(status)


def refused_backoff() -> Backoff:
    """The wait between promotions etcd refused (or that did not get an answer)."""
    return Backoff(POLL_S, REFUSED_CAP_S)
