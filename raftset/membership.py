"""The Raft membership record: the leader's sidecar writes it, the operator believes it.

The leader's sidecar publishes `RaftMembership` (a linearizable MemberList as the leader
sees it) in the membership Lease (contract.membership_lease_name); the operator reads it
and believes it over the heartbeat Leases for who is a member (its own record of a scale
step, raftset.operator.pure.scale_step, is planned against this record's `index`).

`index` orders records: it is the leader's raft index taken just before its MemberList,
and the raft log index only grows, across leaders too. A record whose index is at least
a step's `after_index` was read no earlier than the membership that step was planned on.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from raftset import records


@dataclass(frozen=True)
class RaftMember:
    id: str  # hexadecimal, as etcdctl prints it
    name: str  # empty until the member has started once
    ordinal: int | None  # the pod ordinal its name or peer URL names; None if neither does
    peer_urls: tuple[str, ...]
    learner: bool
    started: bool
    raft_index: int | None  # from the member's own Status; None where it did not answer
    applied_index: int | None

    @property
    def voter(self) -> bool:
        return self.started and not self.learner


@dataclass(frozen=True)
class RaftMembership:
    leader_id: str
    leader: str  # the leader's pod name
    term: int
    index: int
    members: tuple[RaftMember, ...]
    published: str  # RFC 3339 by the sidecar's clock: for people, never compared with another clock

    def by_ordinal(self, ordinal: int) -> RaftMember | None:
        return next((m for m in self.members if m.ordinal == ordinal), None)

    def by_id(self, member_id: str) -> RaftMember | None:
        return next((m for m in self.members if m.id == member_id), None)

    @property
    def change_key(self) -> tuple[object, ...]:
        """What, when it changes, must reach the API at once (indexes move on every write: refresh only)."""
        return (self.leader_id, self.term,
                tuple((m.id, m.name, m.ordinal, m.peer_urls, m.learner, m.started) for m in self.members))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def parse_membership(raw: str | None) -> RaftMembership | None:
    """The record in a membership Lease's annotation; None when absent or unreadable: "unknown"
    (raftset.records)."""
    return records.parse(raw, _membership)


def _membership(data: Any) -> RaftMembership:
    members = tuple(
        RaftMember(
            id=str(m["id"]), name=str(m["name"]),
            ordinal=_optional_int(m.get("ordinal")),
            peer_urls=tuple(str(u) for u in m["peer_urls"]), learner=bool(m["learner"]),
            started=bool(m["started"]), raft_index=_optional_int(m.get("raft_index")),
            applied_index=_optional_int(m.get("applied_index")),
        )
        for m in data["members"]
    )
    return RaftMembership(leader_id=str(data["leader_id"]), leader=str(data["leader"]),
                          term=int(data["term"]), index=int(data["index"]), members=members,
                          published=str(data.get("published", "")))


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)
