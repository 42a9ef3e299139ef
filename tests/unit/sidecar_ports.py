"""In-memory fakes of the sidecar shells' ports: the etcd members (Peers and its clients), the API, the data volume.

One `FakeRaft` holds the membership and each member's Status; every client and the Peers fake read and
change it, and write down each membership call in `calls`, so a test sees what a shell did and in what order.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from raftset.sidecar.io.etcdclient import EtcdClientError, Unreachable
from raftset.sidecar.pure import config
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.etcd import Alarm, Member, Status
from raftset.sidecar.pure.state import State
from tests.unit.sidecar_data import NAMING, member, mid, status

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def settings(ordinal: int, tmp: Path, **env: str) -> SidecarConfig:
    """The sidecar of pod demo-<ordinal>, its data and run dirs under `tmp`."""
    return config.parse([], {
        "RAFTSET_POD_NAME": f"demo-{ordinal}", "RAFTSET_NAMESPACE": "ns", "RAFTSET_CLUSTER": "demo",
        "RAFTSET_PEER_URL_TEMPLATE": "http://{pod}.demo-peer.{namespace}.svc:2380",
        "RAFTSET_CLIENT_URL_TEMPLATE": "http://{pod}.demo-peer.{namespace}.svc:2379",
        "RAFTSET_DATA_DIR": str(tmp / "data"), "RAFTSET_RUN_DIR": str(tmp / "run"), **env})


def fresh_state(ordinal: int, **fields: Any) -> State:
    return dataclasses.replace(State.initial(f"demo-{ordinal}", NOW), **fields)


def workload(replicas: int, **annotations: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "demo", "namespace": "ns", "uid": "w-uid", "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "raftset.dev/v1alpha1", "kind": "EtcdCluster",
                                              "name": "demo", "uid": "c-uid", "controller": True}]},
            "spec": {"replicas": replicas}}


class FakeRaft:
    """The cluster as the members answer: membership, each member's Status (None: it does not answer)."""

    def __init__(self, members: Sequence[Member], statuses: dict[int, Status | None]) -> None:
        self.members = list(members)
        self.statuses = statuses
        self.alarms: list[Alarm] = []
        self.calls: list[str] = []
        self.refuse: dict[str, str] = {}  # operation -> etcd's refusal text
        self.revision = 1  # the cluster's, as a linearizable read reports it
        self.applied: dict[str, int] = {}  # a member's own revision by client URL, where it differs

    def status_at(self, url: str) -> Status | None:
        return next((st for st in self.statuses.values() if st is not None and st.endpoint == url), None)

    def refused(self, url: str, operation: str) -> None:
        if operation in self.refuse:
            raise EtcdClientError(url, operation, self.refuse[operation], reachable=True)


class FakeLock:
    def __init__(self, raft: FakeRaft) -> None:
        self.raft = raft

    async def fence(self, needed: float) -> None:
        self.raft.calls.append("fence")


class FakeClient:
    """One member's client."""

    timeout = 5.0

    def __init__(self, raft: FakeRaft, url: str) -> None:
        self.raft, self.url = raft, url

    async def status(self, timeout: float | None = None) -> Status:
        st = self.raft.status_at(self.url)
        if st is None:
            raise Unreachable(self.url, "Status", "connection refused")
        return st

    async def member_list(self, linearizable: bool = True) -> list[Member]:
        if self.raft.status_at(self.url) is None:
            raise Unreachable(self.url, "MemberList", "connection refused")
        return list(self.raft.members)

    @contextlib.asynccontextmanager
    async def lock(self, name: str, *, timeout: float | None = None) -> AsyncIterator[FakeLock]:
        self.raft.calls.append("lock")
        yield FakeLock(self.raft)
        self.raft.calls.append("unlock")

    async def remove(self, member_id: int) -> None:
        self.raft.refused(self.url, "MemberRemove")
        self.raft.calls.append(f"remove {member_id:x}")
        self.raft.members = [m for m in self.raft.members if m.id != member_id]

    async def promote(self, member_id: int) -> None:
        self.raft.refused(self.url, "MemberPromote")
        self.raft.calls.append(f"promote {member_id:x}")
        self.raft.members = [dataclasses.replace(m, is_learner=False) if m.id == member_id else m
                             for m in self.raft.members]

    async def add_learner(self, peer_url: str) -> tuple[Member, list[Member]]:
        self.raft.refused(self.url, "MemberAdd")
        added = Member(id=0xA00 + len(self.raft.members), name="", peer_urls=(peer_url,), client_urls=(),
                       is_learner=True)
        self.raft.calls.append(f"add learner {peer_url}")
        self.raft.members.append(added)
        return added, list(self.raft.members)

    async def revision(self, *, serializable: bool = False, timeout: float | None = None) -> int:
        self.raft.refused(self.url, "Range")
        return self.raft.applied.get(self.url, self.raft.revision) if serializable else self.raft.revision

    async def move_leader(self, target: int, timeout: float | None = None) -> None:
        self.raft.calls.append(f"move leader {target:x}")

    async def alarms(self) -> list[Alarm]:
        return list(self.raft.alarms)


class FakeEtcd:
    """The ClusterClient: a client per URL, and the calls that ask several members."""

    def __init__(self, raft: FakeRaft) -> None:
        self.raft = raft

    def member(self, url: str) -> FakeClient:
        return FakeClient(self.raft, url)

    async def statuses(self, urls: Sequence[str], timeout: float | None = None) -> dict[str, Status | None]:
        return {u: self.raft.status_at(u) for u in urls}

    async def member_list(self, urls: Sequence[str]) -> tuple[FakeClient, list[Member]]:
        for url in urls:
            if self.raft.status_at(url) is not None:
                return self.member(url), list(self.raft.members)
        raise Unreachable(", ".join(urls), "MemberList", "no member answered")


class FakePeers:
    """raftset.sidecar.io.peers.Peers over a FakeRaft; `linearizable` is what authoritative_members says."""

    def __init__(self, raft: FakeRaft, settings: SidecarConfig, wl: dict[str, Any] | None,
                 *, linearizable: bool = True, kube: FakeKube | None = None) -> None:
        self.raft, self.settings, self.wl, self.linearizable = raft, settings, wl, linearizable
        self.kube = kube or FakeKube()
        self._etcd = FakeEtcd(raft)
        self.reports: list[str] = []

    def etcd(self) -> FakeEtcd:
        return self._etcd

    @property
    def local(self) -> FakeClient:
        return self._etcd.member(self.settings.client_url)

    async def workload(self) -> dict[str, Any] | None:
        return self.wl

    async def kept(self) -> list[int]:
        return self.settings.backend.kept(self.wl) if self.wl else []

    def candidates(self, kept: Sequence[int], leases: Sequence[dict[str, Any]],
                   members: Sequence[Member] = ()) -> list[str]:
        return [NAMING.client_url(o) for o in sorted(kept) if o != self.settings.ordinal]

    async def statuses(self, members: Sequence[Member]) -> dict[int, Status | None]:
        return {m.id: self.raft.statuses.get(m.id) for m in members}

    async def authoritative_members(self, urls: Sequence[str]) -> tuple[FakeClient, list[Member], bool]:
        client, members = await self._etcd.member_list(urls)
        return client, members, self.linearizable

    async def local_member(self) -> int | None:
        st = self.raft.status_at(self.settings.client_url)
        return st.member_id if st is not None else None

    def ordinals(self, members: Sequence[Member]) -> dict[int, int | None]:
        return {m.id: NAMING.ordinal_of_member(m.name, m.peer_urls) for m in members}

    async def member_remove(self, client: FakeClient, member_id: int) -> EtcdClientError | None:
        try:
            await client.remove(member_id)
        except EtcdClientError as exc:
            return exc
        return None

    async def move_leader(self, target: int, where: str) -> bool:
        await self.local.move_leader(target)
        return True


class FakeKube:
    """The API calls the shells make, on dicts; `writes` lists each write in order."""

    def __init__(self, pods: dict[str, dict[str, Any]] | None = None, wl: dict[str, Any] | None = None) -> None:
        self.pods = pods or {}
        self.wl = wl
        self.leases: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.writes: list[str] = []
        self.reads: list[str] = []
        self.labels: dict[str, dict[str, str]] = {}

    async def pod(self, name: str) -> dict[str, Any] | None:
        self.reads.append(f"pod {name}")
        return self.pods.get(name)

    async def label_pod(self, name: str, labels: dict[str, str]) -> None:
        self.writes.append(f"label {name}")
        self.labels.setdefault(name, {}).update(labels)

    async def annotate_pod(self, name: str, annotations: dict[str, str | None]) -> None:
        self.writes.append(f"annotate {name}")
        meta = self.pods.setdefault(name, {"metadata": {"name": name}}).setdefault("metadata", {})
        current = meta.setdefault("annotations", {})
        for key, value in annotations.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value

    async def workload(self, backend: Any, name: str) -> dict[str, Any] | None:
        return self.wl

    async def member_leases(self, cluster: str) -> list[dict[str, Any]]:
        return [lease for lease in self.leases.values() if "heartbeat" in str(lease.get("metadata", {}).get("labels"))]

    async def apply_lease(self, lease: dict[str, Any]) -> None:
        self.writes.append(f"lease {lease['metadata']['name']}")
        self.leases[lease["metadata"]["name"]] = lease

    async def delete_lease(self, name: str) -> None:
        self.writes.append(f"delete lease {name}")
        self.leases.pop(name, None)

    async def post_event(self, involved: dict[str, Any], *, warning: bool, reason: str, message: str,
                         component: str) -> None:
        self.events.append({"reason": reason, "message": message, "warning": warning})


class FakeVolume:
    """raftset.sidecar.io.startup.DataVolume in memory: what would be written, and the State it sets."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.startups: list[tuple[str, dict[str, str], bool]] = []
        self.remembered: list[tuple[int, str | None]] = []

    def write_startup(self, initial_state: str, cluster: dict[str, str], *, force_new_cluster: bool = False) -> None:
        self.startups.append((initial_state, dict(cluster), force_new_cluster))
        self.state.startup_written = True
        self.state.phase = "started"

    def remember_member(self, member_id: int, cluster: dict[str, str] | None = None,
                        recovered: str | None = None) -> None:
        self.state.member_id = member_id
        self.remembered.append((member_id, recovered))


def three_voters(leader: int = 0, *, down: Sequence[int] = ()) -> FakeRaft:
    """demo-0..2, all voting, `leader` leads; the ordinals in `down` do not answer."""
    return FakeRaft([member(o) for o in range(3)],
                    {mid(o): None if o in down else status(o, leader=leader) for o in range(3)})


