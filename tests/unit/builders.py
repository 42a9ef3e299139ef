"""Pure test data for the unit tier: heartbeat Leases, Members and cluster bodies.

Shaped exactly like the objects the sidecar writes and the apiserver returns, so that
the tests feed the operator core what it will really read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from raftset import contract
from raftset.membership import RaftMember, RaftMembership
from raftset.operator.pure import spec
from raftset.operator.pure.heartbeats import HeartbeatRecord

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
CLUSTER = "demo"
LEASE_SECONDS = 30


def member(ordinal: int, role: str = contract.ROLE_FOLLOWER, *, healthy: bool = True,
           ready: bool | None = None, age: float = 0, duration: int = LEASE_SECONDS,
           cluster: str = CLUSTER) -> HeartbeatRecord:
    """A heartbeat record renewed `age` seconds before NOW (stale once age >= duration); a healthy
    member serves reads unless `ready` says otherwise."""
    renewed = NOW - timedelta(seconds=age)
    serving = healthy if ready is None else ready
    return HeartbeatRecord(
        pod=contract.pod_name(cluster, ordinal),
        ordinal=ordinal,
        member_id=f"{ordinal + 1:016x}",
        role=role,
        healthy=healthy,
        renewed=renewed,
        observed=renewed,
        expires=renewed + timedelta(seconds=duration),
        ready=serving,
        ready_reason="" if serving else "a linearizable read failed: timed out",
    )


def members(ordinals: Iterable[int], leader: int | None,
            overrides: Mapping[int, Mapping[str, Any]] | None = None) -> list[HeartbeatRecord]:
    """Fresh healthy voters on `ordinals`, `leader` leading; `overrides[ordinal]` are member() kwargs."""
    out = []
    for ordinal in ordinals:
        kwargs: dict[str, Any] = {"role": contract.ROLE_LEADER if ordinal == leader
                                  else contract.ROLE_FOLLOWER}
        kwargs.update((overrides or {}).get(ordinal, {}))
        out.append(member(ordinal, **kwargs))
    return out


def heartbeat(role: str = contract.ROLE_FOLLOWER, *, healthy: bool = True,
              member_id: str = "8e9e05c52164694d", pod: str = "demo-0") -> dict[str, Any]:
    """The JSON the sidecar serves on GET /heartbeat and copies into its Lease."""
    return {
        "member_id": member_id, "name": pod, "role": role, "healthy": healthy,
        "raft_term": 2, "raft_index": 17, "time": NOW.isoformat(),
        "ready": healthy, "ready_reason": "" if healthy else "no leader",
    }


def lease(pod: str = "demo-0", beat: Mapping[str, Any] | str | None = None, *,
          renew_time: Any = "2026-01-01T12:00:00.000000Z", duration: Any = LEASE_SECONDS,
          holder: Any = "__pod__") -> dict[str, Any]:
    """A coordination.k8s.io/v1 Lease as the sidecar writes it; `beat` str = raw annotation."""
    if beat is None:
        beat = heartbeat(pod=pod)
    raw = beat if isinstance(beat, str) else json.dumps(beat)
    lease_spec: dict[str, Any] = {"holderIdentity": pod if holder == "__pod__" else holder,
                                  "leaseDurationSeconds": duration}
    if renew_time is not None:
        lease_spec["renewTime"] = renew_time
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": contract.lease_name(pod),
            "namespace": "default",
            "labels": {contract.LABEL_HEARTBEAT: "true", contract.LABEL_CLUSTER: CLUSTER},
            "annotations": {contract.ANNOTATION_HEARTBEAT: raw},
        },
        "spec": lease_spec,
    }


def body(kind: str = contract.KIND_ETCD, *, name: str = CLUSTER, namespace: str = "db",
         status: Mapping[str, Any] | None = None, **spec_fields: Any) -> dict[str, Any]:
    """A cluster custom resource as kopf hands it to a handler."""
    obj: dict[str, Any] = {
        "apiVersion": contract.API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "uid": "0b1c2d3e-uid", "generation": 4},
        "spec": dict(spec_fields),
    }
    if status is not None:
        obj["status"] = dict(status)
    return obj


def cluster(kind: str = contract.KIND_ETCD, workload_kind: str = "StatefulSet",
            **spec_fields: Any) -> spec.Cluster:
    """A parsed cluster; `workload_kind` is the operator's default."""
    return spec.parse(body(kind, **spec_fields), default_workload_kind=workload_kind)


def owned_objects(c: Any, replicas: int, reserved: Any = (), **found: Any) -> list[dict[str, Any]]:
    """What a writing reconcile applies for `c` at this scale: the components' renders, in order."""
    from raftset.operator.components import registry
    from raftset.operator.components.protocol import Round
    from raftset.operator.pure.planner import Plan

    plan = Plan(replicas=replicas, reserved=tuple(reserved), action="steady", message="")
    current = Round(cluster=c, plan=plan, workload=None, marked_pods=(), now=NOW, write=True, **found)
    return registry.rendered(current)


RAFT_INDEX = 100


def raft_member(ordinal: int, *, learner: bool = False, started: bool = True, index: int | None = RAFT_INDEX,
                member_id: str | None = None, cluster: str = CLUSTER) -> RaftMember:
    """A Raft member of `ordinal`; its id is the one member() puts in the heartbeat."""
    return RaftMember(
        id=member_id or f"{ordinal + 1:016x}", name=contract.pod_name(cluster, ordinal) if started else "",
        ordinal=ordinal, peer_urls=(f"http://{contract.pod_name(cluster, ordinal)}.{cluster}-peer:2380",),
        learner=learner, started=started, raft_index=index, applied_index=index,
    )


def raft(entries: Iterable[RaftMember], leader: int | None = 0, *, index: int = RAFT_INDEX,
         term: int = 2) -> RaftMembership:
    """A published membership of `entries`, led by the member of ordinal `leader`."""
    entries = tuple(entries)
    lead = next((m for m in entries if m.ordinal == leader), None)
    return RaftMembership(leader_id=lead.id if lead else "", leader=contract.pod_name(CLUSTER, leader or 0),
                          term=term, index=index, members=entries, published=NOW.isoformat())


def raft_of(records: Iterable[HeartbeatRecord], *, index: int = RAFT_INDEX) -> RaftMembership:
    """The membership Raft would publish for these heartbeat records, stale ones included:
    a stale heartbeat says a pod is quiet, not that its member left."""
    records = list(records)
    leader = next((r.ordinal for r in records if r.role == contract.ROLE_LEADER), None)
    entries = [raft_member(r.ordinal, learner=r.role == contract.ROLE_LEARNER) for r in records]
    return raft(sorted(entries, key=lambda m: m.ordinal or 0), leader, index=index)
