"""Leader election between operator replicas, the decisions: what a replica does with the Lease it read.

Expiry is counted on the reader's own clock, never from the holder's `renewTime` (two nodes'
clocks disagree): `observe` notes when this replica first read the Lease's current version,
and the Lease expires `leaseDurationSeconds` after that, as client-go's `observedTime` does.
The shell that reads and writes the Lease is raftset.operator.election.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass

LEASE_NAME = "raftset-operator"


@dataclass(frozen=True)
class Timing:
    """client-go's defaults: a dead holder is replaced within lease_duration + 2 x retry_period of its
    last renewal (a standby sees it on its next read and takes over on its first read a lease
    duration later)."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("need 0 < retry_period < renew_deadline < lease_duration "
                             f"(got {self.retry_period}, {self.renew_deadline}, {self.lease_duration})")

    @property
    def request_timeout(self) -> float:
        """Per API request: a round's read and write together end within the renew deadline."""
        return self.renew_deadline / 2

    @classmethod
    def from_env(cls) -> Timing:
        env = os.environ
        return cls(lease_duration=float(env.get("RAFTSET_LEASE_DURATION_SECONDS", cls.lease_duration)),
                   renew_deadline=float(env.get("RAFTSET_LEASE_RENEW_DEADLINE_SECONDS", cls.renew_deadline)),
                   retry_period=float(env.get("RAFTSET_LEASE_RETRY_SECONDS", cls.retry_period)))


@dataclass(frozen=True)
class LeaderRecord:
    """What the Lease says about its holder."""

    holder: str | None
    duration: float
    transitions: int = 0


@dataclass(frozen=True)
class LeaderSighting:
    """When this replica first read the Lease's current version, on its own monotonic clock."""

    version: str  # the Lease's resourceVersion: every write changes it
    at: float


class LeaderAction(enum.Enum):
    CREATE = "create"  # no Lease yet
    RENEW = "renew"  # we hold it
    TAKE = "take"  # free or expired: take it over
    WAIT = "wait"  # someone else holds it


def observe(previous: LeaderSighting | None, version: str, now: float) -> LeaderSighting:
    """The sighting after reading version `version` at `now`: the same version keeps its first sighting."""
    if previous is not None and previous.version == version:
        return previous
    return LeaderSighting(version, now)


def expired(record: LeaderRecord, seen: LeaderSighting, now: float) -> bool:
    """No holder, or no change seen for the holder's own lease duration (on our clock, not the holder's)."""
    if not record.holder:
        return True
    return now - seen.at > record.duration


def decide(record: LeaderRecord | None, me: str, seen: LeaderSighting, now: float) -> LeaderAction:
    """What to do with `record` (None: no Lease), which we first saw in its current version as `seen`."""
    if record is None:
        return LeaderAction.CREATE
    if record.holder == me:
        return LeaderAction.RENEW
    return LeaderAction.TAKE if expired(record, seen, now) else LeaderAction.WAIT


def acting_time_left(renewal_started: float, now: float, timing: Timing) -> float:
    """How long a holder may still act after its last successful renewal began (<= 0: stop now).

    Counted from the round's start, which precedes the write a standby can see, so the
    holder stops `lease_duration - renew_deadline` before any standby's expiry.
    """
    return renewal_started + timing.renew_deadline - now
