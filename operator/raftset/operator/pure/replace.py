"""Narrating replaces: the pods' replace records as status rows, conditions and Events.

The pod's sidecar does the work and records each step on its own pod
(contract.ANNOTATION_REPLACE_PROGRESS, raftset.replace.Progress): every step so far, in order,
under the replacement's id, and the finished record (Done, Withdrawn) stays on the pod until the
pod's next replacement. The operator reads those records and remembers in status.narrated, per pod,
how many steps of which replacement it told: every step is told once, however quickly it ran, and
the memory lives in the API, so a restarted operator (or the one that takes over) goes on from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from raftset.contract import ReplacePhase
from raftset.replace import Progress, parse_progress
from raftset.operator.pure.events import Event

# Announced by the Degraded condition they raise while they are the current step; told as Events only
# when they came and went unseen.
_QUIET = (ReplacePhase.WAITING, ReplacePhase.NEEDED)
_STEP_WORDS = {
    ReplacePhase.QUEUED: "waited for another membership change",
    ReplacePhase.WAITING: "waited: the replacement could not go on safely for a while",
    ReplacePhase.NEEDED: "needed replacing; a person was asked to decide",
    ReplacePhase.HANDING_OFF: "member {old} led: leadership was moved first",
    ReplacePhase.REMOVING: "member {old} was removed from Raft",
    ReplacePhase.REJOINING: "joined again as a new member on fresh data (the old data kept aside)",
    ReplacePhase.LEARNER: "the new member{new} caught up as a learner",
}
_REASONS = {
    ReplacePhase.REQUESTED: "ReplaceRequested",
    ReplacePhase.QUEUED: "ReplaceQueued",
    ReplacePhase.WAITING: "ReplaceWaiting",
    ReplacePhase.NEEDED: "ReplaceNeeded",
    ReplacePhase.HANDING_OFF: "ReplaceHandingOff",
    ReplacePhase.REMOVING: "ReplaceRemoving",
    ReplacePhase.REJOINING: "ReplaceRejoining",
    ReplacePhase.LEARNER: "ReplaceLearner",
}


def row(pod: str, requested: bool, progress: str | None) -> dict[str, Any] | None:
    """One status row for a pod's annotations; None when there is nothing to narrate."""
    record = parse_progress(progress)
    if record is None or record.finished or record.phase not in _REASONS:
        if not requested:
            return None
        return {"pod": pod, "phase": str(ReplacePhase.REQUESTED),
                "message": "waiting for the pod's sidecar to take the request"}
    out: dict[str, Any] = {"pod": pod, "phase": record.phase, "message": record.reason,
                           "steps": [s for s in record.steps if s in _REASONS]}
    if record.old_member:
        out["oldMember"] = record.old_member
    if record.new_member:
        out["newMember"] = record.new_member
    if record.cause:
        out["cause"] = record.cause
    return out


def rows(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows of every pod the index holds ({pod, requested, progress}), by pod name."""
    out = [r for e in entries if (r := row(str(e.get("pod")), bool(e.get("requested")), e.get("progress")))]
    return sorted(out, key=lambda r: r["pod"])


def blocked(replacements: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(reason, message) for Degraded: a member needs replacing and policy waits for a person, or a
    replacement cannot go on safely."""
    for phase, verb in ((ReplacePhase.NEEDED, "needs replacing"), (ReplacePhase.WAITING, "waits")):
        found = [r for r in replacements if r.get("phase") == phase]
        if found:
            return _REASONS[phase], "; ".join(f"replacing {r['pod']} {verb}: {r['message']}" for r in found)
    return None


def under_way(replacements: Sequence[Mapping[str, Any]]) -> str | None:
    """A Progressing message while some replacement is under way."""
    if not replacements:
        return None
    return "; ".join(f"replacing {r['pod']}: {r['phase']} ({r['message']})" for r in replacements)


@dataclass(frozen=True)
class Tale:
    """One step of a pod's replacement record not told yet."""

    pod: str
    replacement: str  # the record's id (Progress.id; the old member's on a record from before ids)
    step: int  # its index in the record's steps
    event: Event | None  # (type, reason, message); None: the Degraded condition tells it


def untold(entries: Sequence[Mapping[str, Any]], narrated: Sequence[Mapping[str, Any]]) -> list[Tale]:
    """The steps of the pods' records ({pod, progress} of the index) that status.narrated does not count as
    told, in order, by pod. A step is due once, whether it is under way or came and went between reconciles."""
    told = {str(n.get("pod")): n for n in narrated}
    out: list[Tale] = []
    for e in sorted(entries, key=lambda e: str(e.get("pod"))):
        pod, record = str(e.get("pod")), parse_progress(e.get("progress"))
        if record is None:
            continue
        key = identity(record)
        memory = told.get(pod) or {}
        start = int(memory.get("steps") or 0) if memory.get("replacement") == key else 0
        out += [Tale(pod, key, i, _event(pod, record, i)) for i in range(start, len(record.steps))]
    return out


def identity(record: Progress) -> str:
    return record.id or record.old_member or "0"


def remember(narrated: Sequence[Mapping[str, Any]], tale: Tale) -> list[dict[str, Any]]:
    """status.narrated once `tale` is told: its pod's row counts the steps up to it. Rows of pods without a
    record stay: a record is never taken as gone on its absence from one reading."""
    rows = {str(n.get("pod")): dict(n) for n in narrated}
    rows[tale.pod] = {"pod": tale.pod, "replacement": tale.replacement, "steps": tale.step + 1}
    return [rows[p] for p in sorted(rows)]


def event_name(cluster: str, tale: Tale) -> str:
    """The step's Event is named after it: told twice (an operator killed before its status showed the
    step told), it is still one Event."""
    return f"{cluster}.replace-{tale.pod}-{tale.replacement}-{tale.step}"


def _event(pod: str, record: Progress, index: int) -> Event | None:
    step = record.steps[index]
    current = index == len(record.steps) - 1 and not record.finished
    old, new = record.old_member or "?", record.new_member
    if step == ReplacePhase.DONE:
        by = f"member {new}" if new else "a new member"
        why = f" (why: {record.cause})" if record.cause else ""
        return Event("Normal", "Replaced", f"{pod}: member {old} was replaced by {by}, which votes; the old data dir "
                                      f"was released{why}")
    if step == ReplacePhase.WITHDRAWN:
        if index > 0 and record.steps[index - 1] == ReplacePhase.NEEDED:
            return Event("Normal", "ReplaceNotNeeded", f"{pod}: the member serves again; no replacement needed")
        return Event("Normal", "ReplaceWithdrawn", f"{pod}: the replace request was withdrawn before the member left Raft")
    if step not in _STEP_WORDS or (current and step in _QUIET):
        return None
    if current:
        return Event("Normal", _REASONS[step], f"{pod}: {record.reason}")
    words = _STEP_WORDS[step].format(old=old, new=f" {new}" if new else "")
    return Event("Normal", _REASONS[step], f"{pod}: {words}")
