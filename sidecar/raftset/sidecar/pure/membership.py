"""What the leader's sidecar publishes as the Raft membership, and when.

Pure: the record from the leader's own Status, its linearizable MemberList and the
members' Statuses; whether it is due (on a change of who is a member, learner or
started, or of leader and term, plus a slow refresh); and the Lease that carries it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from raftset import contract
from raftset.membership import RaftMember, RaftMembership
from raftset.sidecar.pure import leases
from raftset.sidecar.pure.etcd import Member, Status
from raftset.sidecar.pure.heartbeat import rfc3339


def record(leader: Status, leader_pod: str, members: Sequence[Member], statuses: Mapping[int, Status | None],
           ordinal_of: Mapping[int, int | None], now: datetime) -> RaftMembership:
    """`leader` is the leader's Status taken before `members` was read: its index orders records."""
    return RaftMembership(
        leader_id=f"{leader.member_id:x}",
        leader=leader_pod,
        term=leader.raft_term,
        index=leader.raft_index,
        members=tuple(
            RaftMember(
                id=m.hex_id, name=m.name, ordinal=ordinal_of.get(m.id), peer_urls=m.peer_urls,
                learner=m.is_learner, started=m.started,
                raft_index=st.raft_index if (st := statuses.get(m.id)) else None,
                applied_index=st.raft_applied_index if st else None,
            )
            for m in sorted(members, key=lambda m: m.id)
        ),
        published=rfc3339(now),
    )


def index_lags(record: RaftMembership, cluster: str) -> dict[str, int]:
    """How far each member's raft index trails the leader's, by pod (hex id where no pod is known)."""
    lead = next((m.raft_index for m in record.members if m.id == record.leader_id), None)
    if lead is None:
        return {}
    return {(contract.pod_name(cluster, m.ordinal) if m.ordinal is not None else m.id): max(0, lead - m.raft_index)
            for m in record.members if m.raft_index is not None}


def should_publish(last: RaftMembership | None, current: RaftMembership, last_write: float | None, now: float,
                   refresh: float) -> bool:
    return leases.due(last.change_key if last else None, current.change_key, last_write, now, refresh)


def lease_body(cluster: str, namespace: str, membership: RaftMembership, *, duration: int,
               owner: Mapping[str, Any] | None) -> dict[str, Any]:
    """The cluster's membership Lease, held by the leader that wrote it; owned by the cluster object, not the
    workload: a workload deleted under a running cluster is re-created with the ordinals this record names."""
    return leases.lease(contract.membership_lease_name(cluster), namespace,
                        labels={**contract.selector_labels(cluster), contract.LABEL_MEMBERSHIP: "true"},
                        annotations={contract.ANNOTATION_MEMBERSHIP: membership.to_json()},
                        holder=membership.leader, duration=duration, renew_time=membership.published, owner=owner)
