"""The heartbeat: the JSON served on GET /heartbeat and the Lease that carries it.

Written to the API on a change of what the operator acts on (role, health, readiness,
member id) plus a slow refresh, never on every poll.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from raftset import contract
from raftset.sidecar.pure import leases
from raftset.sidecar.pure.etcd import Status
from raftset.sidecar.pure.readiness import Readiness


@dataclass(frozen=True)
class Heartbeat:
    member_id: str  # hex, "" while unknown
    name: str
    role: str
    healthy: bool
    raft_term: int
    raft_index: int  # the commit index (etcd's and Xline's Status.raftIndex); served without quorum too
    raft_applied_index: int  # with raft_index: what quorum-loss recovery chooses the survivor by
    time: str  # RFC 3339, UTC
    cluster_id: str
    # /readyz's verdict: a linearizable read went through this member. Health is Status alone.
    ready: bool
    ready_reason: str  # why not; empty when ready

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)

    @property
    def change_key(self) -> tuple[str, str, bool, bool]:
        """What, when it changes, must reach the API at once (a new reason alone waits for the refresh)."""
        return (self.member_id, self.role, self.healthy, self.ready)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def role_of(status: Status | None) -> str:
    if status is None:
        return contract.ROLE_UNKNOWN
    if status.is_learner:
        return contract.ROLE_LEARNER
    if status.leader == 0:
        return contract.ROLE_UNKNOWN
    return contract.ROLE_LEADER if status.is_leader else contract.ROLE_FOLLOWER


def beat(name: str, status: Status | None, now: datetime, known_id: int | None = None, *,
         serving: Readiness) -> Heartbeat:
    """`serving` is the readiness verdict as of the last linearizable read (readiness.readiness)."""
    member_id = status.member_id if status else known_id
    return Heartbeat(
        member_id=f"{member_id:x}" if member_id else "",
        name=name,
        role=role_of(status),
        healthy=status is not None and status.leader != 0 and not status.errors,
        raft_term=status.raft_term if status else 0,
        raft_index=status.raft_index if status else 0,
        raft_applied_index=status.raft_applied_index if status else 0,
        time=rfc3339(now),
        cluster_id=f"{status.cluster_id:x}" if status else "",
        ready=serving.ready,
        ready_reason=serving.reason,
    )


def should_write(last: Heartbeat | None, current: Heartbeat, last_write: float | None, now: float,
                 refresh: float) -> bool:
    return leases.due(last.change_key if last else None, current.change_key, last_write, now, refresh)


def lease_body(
    pod: str, namespace: str, cluster: str, hb: Heartbeat, *, duration: int,
    owner: Mapping[str, Any] | None, extra_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The member's Lease; owned by the workload so that deleting the cluster removes it."""
    labels = {
        **contract.selector_labels(cluster),
        **(extra_labels or {}),
        contract.LABEL_HEARTBEAT: "true",
        contract.LABEL_ROLE: hb.role,
    }
    return leases.lease(contract.lease_name(pod), namespace, labels=labels,
                        annotations={contract.ANNOTATION_HEARTBEAT: hb.to_json()},
                        holder=pod, duration=duration, renew_time=hb.time, owner=owner)


def owner_reference(workload: Mapping[str, Any] | None) -> dict[str, Any] | None:
    meta = (workload or {}).get("metadata") or {}
    if not meta.get("uid"):
        return None
    return {
        "apiVersion": workload.get("apiVersion", ""),  # type: ignore[union-attr]
        "kind": workload.get("kind", ""),  # type: ignore[union-attr]
        "name": meta.get("name", ""),
        "uid": meta["uid"],
    }


def cluster_owner(workload: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The cluster object (EtcdCluster / XlineCluster) that controls the workload, else the workload.

    What must outlive the workload (the published Raft membership: a re-created workload keeps
    the ordinals that still have members by it) is owned by the cluster object instead.
    """
    meta = (workload or {}).get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("apiVersion") == contract.API_VERSION and ref.get("uid"):
            return {"apiVersion": ref["apiVersion"], "kind": ref.get("kind", ""), "name": ref.get("name", ""),
                    "uid": ref["uid"]}
    return owner_reference(workload)


def event_subject(workload: Mapping[str, Any] | None, namespace: str) -> dict[str, Any] | None:
    """What a sidecar's Events are about: the cluster object that controls the workload (so that
    `kubectl describe etcdcluster` shows them), else the workload itself."""
    owner = cluster_owner(workload)
    return {**owner, "namespace": namespace} if owner else None
