"""Membership-clean: remove members whose pods are gone for good, safely.

Only the leader's sidecar acts (one actor at a time); a member goes only if it has been
absent (never started, or not answering) for longer than the grace period AND either its
ordinal is not kept, or it is a learner that never started (a kept ordinal whose join
never completed: etcd allows one learner at a time, so it would block every later join;
its pod adds itself again when it starts). A started member of a kept ordinal is only
restarting and is never removed, unless the operator marked its pod lost with its node
(raftset.nodeloss): then it goes once it has not answered this sidecar for CONFIRM_S, its
data being gone with the node. A member of an ordinal not kept whose pod the API no longer
has goes after CONFIRM_S too: no pod is left to run its leave (one deleted before the
workload let its ordinal go kept its member, as it should then). Never if that would lose
quorum; at most one removal per round. The absence clock lives in the acting sidecar's
memory: a new leader starts it afresh, which can only delay a removal, never hasten one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

from raftset.sidecar.pure.etcd import Member

from raftset.sidecar.pure.removal_guard import has_quorum, safe_to_remove

# How long a member must not have answered this sidecar before a removal on the API's evidence
# (its pod marked lost with its node, or gone while its ordinal is not kept): the API's view
# waits for Raft's own (two rounds at the shortest clean interval, and the status calls' timeouts).
CONFIRM_S = 20.0


def absences(
    previous: Mapping[int, float], members: Sequence[Member], answering: Set[int], now: float,
) -> dict[int, float]:
    """Since when each absent member has been absent; present members drop out."""
    out: dict[int, float] = {}
    for m in members:
        if m.started and m.id in answering:
            continue
        out[m.id] = previous.get(m.id, now)
    return out


@dataclass(frozen=True)
class CleanDecision:
    remove: int | None
    reason: str


def decide(
    *, leading: bool, members: Sequence[Member], ordinal_of: Mapping[int, int | None], kept: Sequence[int],
    absent_since: Mapping[int, float], answering: Set[int], now: float, grace: float,
    lost: Set[int] = frozenset(), gone: Set[int] = frozenset(),
) -> CleanDecision:
    """`lost`: members whose pods carry the operator's node-lost mark; `gone`: members whose pods
    the API did not have when it was asked this round."""
    if not leading:
        return CleanDecision(None, "not the leader: another sidecar cleans")
    voters = frozenset(m.id for m in members if not m.is_learner)
    if not has_quorum(voters, answering):
        return CleanDecision(None, "the cluster has no healthy quorum: remove nothing")
    candidates: list[tuple[bool, int, int]] = []
    waiting: list[str] = []
    for m in members:
        ordinal = ordinal_of.get(m.id)
        if ordinal is None or m.id not in absent_since:
            continue
        if ordinal in kept and (m.started or not m.is_learner) and m.id not in lost:
            continue
        podless = m.id in gone and ordinal not in kept
        absent_for = now - absent_since[m.id]
        wait = min(grace, CONFIRM_S) if m.id in lost or podless else grace
        if absent_for < wait:
            waiting.append(f"{m.hex_id} absent {absent_for:.0f}s < {wait:.0f}s")
            continue
        if not safe_to_remove(voters, answering, m.id):
            waiting.append(f"{m.hex_id} would lose quorum")
            continue
        if m.id in lost:
            why = f"member {m.hex_id} is on a node the operator found lost, and has not answered for {absent_for:.0f}s"
        elif podless:
            why = (f"member {m.hex_id}: ordinal {ordinal} is not kept and has no pod to leave from, and the member "
                   f"has not answered for {absent_for:.0f}s")
        else:
            why = f"member {m.hex_id} is not desired, or a learner that never started, and absent past the grace period"
        # Learners and never-started entries first, then the highest ordinal.
        candidates.append((not m.is_learner and m.started, -ordinal, m.id, why))
    if not candidates:
        return CleanDecision(None, "; ".join(waiting) or "nothing to clean")
    _, _, victim, why = min(candidates)
    return CleanDecision(victim, why)
