"""Quorum loss: who survives, which survivor starts first, and the record of a recovery.

Shared by the operator (which detects the loss, chooses the survivor and writes the record
on the workload) and the sidecars (which read the record at join time and act on it).

Why the highest committed index is the right survivor. Raft's Log Matching property says
two logs that hold an entry with the same index and term agree on every entry before it,
and a committed entry is never overwritten. So every member's committed prefix is a prefix
of one and the same sequence, and the survivor with the highest committed index holds every
entry any reachable survivor knows to be committed. Without quorum no commit index can
move, so the indexes the survivors report are stable while the choice is made. etcd's
`--force-new-cluster` keeps exactly the committed prefix of the chosen member's log (it
discards WAL entries above the persisted commit index), so choosing by committed index is
choosing by what will survive. The term breaks ties between equal committed indexes (the
same prefix, by Log Matching; a higher term saw more recent leaders), then the applied
index (more of it already in the key space: less to replay), then the pod's ordinal and
name, so the choice is a total order and deterministic.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from raftset import records


@dataclass(frozen=True)
class Survivor:
    """A member that still answers Maintenance.Status, with what it reports."""

    pod: str
    ordinal: int
    member_id: str  # hexadecimal
    committed: int  # Status.raftIndex: etcd's and Xline's commit index
    term: int
    applied: int

    def describe(self) -> str:
        return f"{self.pod} (member {self.member_id}, committed {self.committed}, applied {self.applied}, term {self.term})"


def rank(survivor: Survivor) -> tuple[int, int, int, int, str]:
    """Larger is more up to date; ordinal and name (smaller wins) make it a total order."""
    return (survivor.committed, survivor.term, survivor.applied, -survivor.ordinal, survivor.pod)


def choose(survivors: Iterable[Survivor]) -> Survivor | None:
    """The survivor to restart as a one-member cluster: the highest committed index first."""
    candidates = [s for s in survivors if s.member_id]
    if not candidates:
        return None
    best = max(rank(s) for s in candidates)
    # Ties on (committed, term, applied, ordinal) can only come from two records with one
    # pod name; the name in the rank makes even that deterministic.
    return next(s for s in candidates if rank(s) == best)


@dataclass(frozen=True)
class QuorumLossRecord:
    """What the operator writes on the workload; the sidecars and a restarted operator read it.

    The record names the survivor and nothing else changes in it: which step comes next is
    read from the data (the survivor's marker says it started alone for this recovery) and
    from Raft (the survivor's MemberList), so the record needs no phase to be kept in step.
    """

    id: str  # unique per recovery: names the moved-aside data dirs
    survivor: str  # pod name
    member_id: str  # the survivor's member id (hex): its data dir must still hold this member
    started: str  # RFC 3339, the operator's clock: for people and the RTO, not for decisions
    requested: str  # "auto", a pod name, or "Automatic" (the spec's policy)
    # The survivor's raft term when it was chosen (0: a record written before the term was kept).
    # Its sidecar refuses to force while a peer still has a leader at this term or later.
    term: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def parse_record(raw: str | None) -> QuorumLossRecord | None:
    """The record, or None if absent or unreadable (then no recovery is under way)."""
    record = records.parse(raw, lambda doc: QuorumLossRecord(
        id=str(doc["id"]), survivor=str(doc["survivor"]), member_id=str(doc["member_id"]),
        started=str(doc.get("started") or ""), requested=str(doc.get("requested") or ""),
        term=_term(doc.get("term"))))
    return record if record is not None and record.id and record.survivor and record.member_id else None


def _term(raw: object) -> int:
    """A non-negative integer from a record anyone could have written; 0 if it is not one."""
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 else 0
