"""What an etcd member answers, as plain values: members, statuses, alarms, hashes.

The client (raftset.sidecar.io.etcdclient) builds them from the wire; the pure decisions read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class Member:
    id: int
    name: str  # empty until the member has started once (etcd); an initial member's from the start (Xline)
    peer_urls: tuple[str, ...]
    client_urls: tuple[str, ...]  # empty until the member has started once (both)
    is_learner: bool

    @property
    def started(self) -> bool:
        """Whether the member ever ran. etcd lists one that never did without a name; Xline lists its
        initial members by name from the start, and each one's client URLs only once it has run."""
        return bool(self.name) and bool(self.client_urls)

    @property
    def hex_id(self) -> str:
        return f"{self.id:x}"


@dataclass(frozen=True)
class KVHash:
    """One member's hash of its key space up to `revision` (Maintenance.HashKV)."""

    member_id: int
    revision: int
    hash: int
    compact_revision: int


class AlarmKind(Enum):
    """Maintenance.Alarm's types (etcd's AlarmType), by name."""

    NOSPACE = 1
    CORRUPT = 2


@dataclass(frozen=True)
class Alarm:
    """One member's active alarm."""

    member_id: int
    kind: AlarmKind


@dataclass(frozen=True)
class Status:
    """One member's own view (Maintenance.Status)."""

    endpoint: str
    member_id: int
    cluster_id: int
    leader: int  # 0 while there is no leader
    raft_term: int
    raft_index: int
    raft_applied_index: int
    is_learner: bool
    errors: tuple[str, ...]
    version: str
    db_size: int
    db_size_in_use: int = 0  # what defragmentation would keep; Xline reports db_size here

    @property
    def fragmented_bytes(self) -> int:
        """What a defragmentation would give back to the file system."""
        return max(0, self.db_size - self.db_size_in_use) if self.db_size_in_use else 0

    @property
    def is_leader(self) -> bool:
        return self.leader != 0 and self.leader == self.member_id

    @property
    def problems(self) -> tuple[str, ...]:
        """`errors` without the alarms: etcd lists every active alarm, whichever member it names, on every
        member, so an alarm says nothing about this member's own health."""
        return tuple(e for e in self.errors if " alarm:" not in f" {e}")
