"""A member lost with its node: the operator's mark on the pod and the leader's sidecar's verdict.

A member whose data lives only on its node (a local PersistentVolume, or an emptyDir) cannot come
back elsewhere: its pod stays on the lost node, and the workload controller re-creates nothing.
Once the node has not been Ready for the grace period (spec.recovery), the operator marks the pod
(contract.ANNOTATION_NODE_LOST). The mark is a request, not a verdict: the node's record is only
the API's view, and a node cut off from the apiserver can still run a healthy member. The leader's
sidecar decides on what it sees at that moment (raftset.sidecar.pure.clean): a member that does not
answer, whose removal leaves a quorum of voters that do, is removed from Raft, and the sidecar
records that on the pod (contract.ANNOTATION_NODE_LOST_VERDICT, a Removal); a member that answers is
left alone (the operator reads that in the leader's membership record). Only after the Removal does
the operator delete the pod and its claim, so that the workload controller re-creates the pod on
another node, whose sidecar joins as a new member.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from raftset import records


@dataclass(frozen=True)
class Mark:
    """The operator's request on the pod: its node `node` has not been Ready since `since`."""

    node: str
    since: str  # RFC 3339: when the node's Ready condition last turned
    marked: str  # RFC 3339

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True)
class Removal:
    """The leader's sidecar's answer to a Mark, on the same pod: the member is out of Raft."""

    member: str  # hex id of the member removed
    by: str  # the removing sidecar's pod
    at: str  # RFC 3339, by that sidecar's clock
    reason: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def _text(doc: Any, key: str) -> str:
    value = doc[key]
    if not isinstance(value, str):
        raise TypeError(key)
    return value


def parse_mark(raw: str | None) -> Mark | None:
    return records.parse(raw, lambda doc: Mark(_text(doc, "node"), _text(doc, "since"), _text(doc, "marked")))


def parse_removal(raw: str | None) -> Removal | None:
    return records.parse(raw, lambda doc: Removal(_text(doc, "member"), _text(doc, "by"), _text(doc, "at"),
                                                  str(doc.get("reason", ""))))
