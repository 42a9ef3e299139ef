"""Heartbeat freshness measured on the operator's own clock, as Kubernetes leader election does.

A sidecar's Lease carries `renewTime` from the sidecar's clock; comparing it with the
operator's clock makes every member look dead (or immortal) as soon as two nodes'
clocks disagree. client-go's leader election never compares the two: it remembers when
*it* saw the record change and counts `leaseDurationSeconds` from there. This module
does the same, as pure functions over `Sighting`s:

* a Lease whose token (its resourceVersion, else its renewTime) differs from the last
  one seen was renewed: it is observed now, and counts as *confirmed*;
* a Lease seen for the first time (a new member, or every Lease after an operator
  restart, since sightings live only in memory) is observed now but *unconfirmed*:
  nobody saw it renewed yet;
* a Lease is fresh until `leaseDurationSeconds` after it was last observed.

What an unconfirmed record means is decided where it is used: the status counts it as
fresh (as client-go counts a freshly seen holder), the planner takes no step while a
member's record is unconfirmed (`raftset.operator.pure.planner.awaiting_renewal`). That
bounds what a restart can do: a dead member looks alive for at most one Lease duration,
and during that time no member is removed or restarted on its account.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Sighting:
    """When the operator last saw a Lease change, on its own clock."""

    token: str  # what changes on every renewal: the resourceVersion, else the renewTime
    observed: datetime  # the operator's time of the first sighting of this token
    confirmed: bool  # a change was seen (not only a first sighting)


def token(lease: Mapping[str, Any]) -> str:
    """What changes whenever the sidecar writes its Lease."""
    meta = lease.get("metadata") or {}
    spec = lease.get("spec") or {}
    return str(meta.get("resourceVersion") or spec.get("renewTime") or "")


def observe(previous: Sighting | None, current: str, now: datetime) -> Sighting:
    """The sighting after seeing a Lease with token `current` at `now`.

    The same token again (a relist after a watch restarts, an unrelated event) is not a
    renewal: the earlier sighting stands.
    """
    if previous is None:
        return Sighting(current, now, confirmed=False)
    if previous.token == current:
        return previous
    return Sighting(current, now, confirmed=True)
