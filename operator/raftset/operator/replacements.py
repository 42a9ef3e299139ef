"""Narrating member replacements: the pods' replace annotations as status rows, conditions and Events.

The pod's sidecar does the work and records each step on its own pod
(contract.ANNOTATION_REPLACE_PROGRESS, raftset.replacement.Progress); the operator only
reads those records. It keeps no memory of its own: an Event is due when a row in the new
status differs from the row in the previous one, and a row that disappears after the member
left Raft is a finished replacement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from raftset.contract import ReplacePhase
from raftset.replacement import parse_progress

# Announced by the Degraded condition they raise, not as steps.
_QUIET = (ReplacePhase.WAITING, ReplacePhase.NEEDED)
_STEP_WORDS = {
    ReplacePhase.REQUESTED: "replacement requested",
    ReplacePhase.QUEUED: "waited for another membership change",
    ReplacePhase.HANDING_OFF: "the member led: leadership was moved first",
    ReplacePhase.REMOVING: "the member was removed from Raft",
    ReplacePhase.REJOINING: "joined again as a new member on fresh data (the old data kept aside)",
    ReplacePhase.LEARNER: "the new member caught up as a learner",
}
# After one of these the old member has left Raft: the record disappearing means done.
_LEFT = (ReplacePhase.REMOVING, ReplacePhase.REJOINING, ReplacePhase.LEARNER)
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
    if record is None or record.phase not in _REASONS:
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


def announcements(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(event type, reason, message): one Event per step a replacement took since the last status.

    Waiting and Needed are announced by the Degraded condition they raise (status.announcements), not twice.
    """
    before = {r["pod"]: r for r in old}
    after = {r["pod"]: r for r in new}
    out: list[tuple[str, str, str]] = []
    for pod, r in sorted(after.items()):
        prev = before.get(pod) or {}
        if (prev.get("phase"), prev.get("message")) == (r["phase"], r["message"]):
            continue
        seen, steps = list(prev.get("steps") or []), list(r.get("steps") or [])
        missed = steps[len(seen):-1] if steps[:len(seen)] == seen else []
        for step in missed:  # steps taken between two reconciles: told, without their details
            if step not in _QUIET:
                out.append(("Normal", _REASONS[step], f"{pod}: {_STEP_WORDS[step]}"))
        if r["phase"] not in _QUIET:
            out.append(("Normal", _REASONS[r["phase"]], f"{pod}: {r['message']}"))
    for pod, r in sorted(before.items()):
        if pod in after:
            continue
        if r.get("phase") == ReplacePhase.NEEDED:
            out.append(("Normal", "ReplaceNotNeeded", f"{pod}: the member serves again; no replacement needed"))
        elif r.get("phase") in _LEFT:
            new_member = f" by member {r['newMember']}" if r.get("newMember") else " by a new member"
            why = f" (why: {r['cause']})" if r.get("cause") else ""
            out.append(("Normal", "Replaced", f"{pod}: member {r.get('oldMember', '?')} was replaced{new_member}, "
                                              f"which votes; the old data dir was released{why}"))
        else:
            out.append(("Normal", "ReplaceWithdrawn", f"{pod}: the replace request was withdrawn before the "
                                                      f"member left Raft"))
    return out
