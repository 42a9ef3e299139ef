"""The replace request and the sidecar's record of a replacement: read by the sidecar and the operator.

The user asks with contract.ANNOTATION_REPLACE=true on a pod; that pod's sidecar does the
work (raftset.sidecar.pure.replace) and records each step in contract.ANNOTATION_REPLACE_PROGRESS
on the same pod; the operator narrates the record (raftset.operator.pure.replace). A finished
record (Done, Withdrawn) stays on the pod until the pod's next replacement begins: a replacement
that ran from start to end between two reconciles is still there to be told.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from raftset import contract, records

_TRUE = ("true", "yes", "1")


def requested(annotations: Mapping[str, str] | None) -> bool:
    """`kubectl annotate pod <pod> raftset.dev/replace=true` (any other value asks nothing)."""
    return str((annotations or {}).get(contract.ANNOTATION_REPLACE, "")).strip().lower() in _TRUE


@dataclass(frozen=True)
class Progress:
    """One replacement as the sidecar records it on its pod."""

    phase: str  # contract.ReplacePhase
    old_member: str  # hex id of the member being replaced
    new_member: str  # hex id of the member that replaces it, once added
    reason: str
    # Every phase so far, in order: the operator reconciles on a timer and may miss a short
    # step; from this it still announces each one.
    steps: tuple[str, ...] = ()
    # Why it began: a person's request, or the diagnosis (corrupt data, a crash loop, the
    # leader's verdict); kept from the first record on, so the end can still say why.
    cause: str = ""
    # Which replacement this is (made up when its record begins): the operator remembers how many
    # of its steps it told by this id, and names each step's Event after it.
    id: str = ""

    @property
    def finished(self) -> bool:
        """Done or withdrawn: kept for the operator to tell; no replacement is under way."""
        return self.phase in (contract.ReplacePhase.DONE, contract.ReplacePhase.WITHDRAWN)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def parse_progress(raw: str | None) -> Progress | None:
    """The record; None when absent or unreadable (raftset.records)."""
    return records.parse(raw, lambda doc: Progress(
        str(doc["phase"]), str(doc["old_member"]), str(doc.get("new_member", "")), str(doc.get("reason", "")),
        tuple(str(s) for s in doc.get("steps") or ()), str(doc.get("cause", "")), str(doc.get("id", ""))))
