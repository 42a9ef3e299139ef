"""The etcd members and the workload a sidecar asks about: its clients, and the reads several shells share.

MemberRemove and MoveLeader are here too: each is sent once and never retried here; the caller judges
etcd's refusal.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from raftset.sidecar.io.etcdclient import ClientTLS, ClusterClient, EtcdClientError, MemberClient
from raftset.sidecar.io.kube import SidecarKube
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.etcd import Member, Status

log = logging.getLogger("raftset.sidecar")


class Peers:
    def __init__(self, settings: SidecarConfig, kube: SidecarKube, *, count: Callable[[str, bool], None],
                 report: Callable[[str, BaseException], None]) -> None:
        self.settings = settings
        self.kube = kube
        self.count = count  # (call, succeeded): the sidecar's membership-call counter
        self.report = report  # (where, error): shown on /readyz
        self._etcd: ClusterClient | None = None

    def etcd(self) -> ClusterClient:
        """The etcd clients, created once the TLS files (if any) load."""
        if self._etcd is None:
            tls = ClientTLS.load(self.settings.tls) if self.settings.tls else None
            capabilities = self.settings.engine.capabilities
            self._etcd = ClusterClient(
                tls, timeout=5.0, linearizable_member_list=capabilities.linearizable_member_list,
                lost_names=None if capabilities.keeps_joined_names else self.settings.naming.advertised)
        return self._etcd

    @property
    def local(self) -> MemberClient:
        return self.etcd().member(self.settings.client_url)

    async def workload(self) -> dict[str, Any] | None:
        """Our StatefulSet / Advanced StatefulSet, or None while it does not exist."""
        return await self.kube.workload(self.settings.backend, self.settings.workload_name)

    async def kept(self) -> list[int]:
        """The ordinals our workload keeps (none while it does not exist)."""
        workload = await self.workload()
        return self.settings.backend.kept(workload) if workload else []

    def candidates(self, kept: Sequence[int], leases: Sequence[dict[str, Any]],
                   members: Sequence[Member] = ()) -> list[str]:
        """Client URLs of every other member we could ask, known ones first."""
        naming = self.settings.naming
        urls = [u for m in members if not m.is_learner for u in m.client_urls]
        ordinals = set(kept)
        for lease in leases:
            ordinal = naming.ordinal_of_name((lease.get("spec") or {}).get("holderIdentity") or "")
            if ordinal is not None:
                ordinals.add(ordinal)
        urls += [naming.client_url(o) for o in sorted(ordinals) if o != self.settings.ordinal]
        own = self.settings.client_url
        return [u for u in dict.fromkeys(urls) if u != own]

    async def statuses(self, members: Sequence[Member]) -> dict[int, Status | None]:
        """Status of every member by id; None where it did not answer as itself."""
        urls = {m.id: m.client_urls[0] for m in members if m.client_urls}
        answers = await self.etcd().statuses(urls.values(), timeout=self.settings.peer_status_timeout)
        out: dict[int, Status | None] = {}
        for m in members:
            st = answers.get(urls.get(m.id, ""))
            out[m.id] = st if st is not None and st.member_id == m.id else None
        return out

    async def authoritative_members(self, urls: Sequence[str]) -> tuple[MemberClient, list[Member], bool]:
        """MemberList, and whether it may decide something destructive (fault b).

        Linearizable where the engine answers so; elsewhere (Xline) the view of the member
        that reports itself leader. Failing both, the first answer, marked not linearizable:
        good enough to rejoin or to wait, never to move data aside or remove an entry.
        """
        etcd = self.etcd()
        if self.settings.engine.capabilities.linearizable_member_list:
            client, members = await etcd.member_list(urls)
            return client, members, True
        answers = await etcd.statuses(urls, timeout=self.settings.peer_status_timeout)
        leader = next((u for u, st in answers.items() if st is not None and st.is_leader), None)
        if leader is not None:
            with contextlib.suppress(EtcdClientError):
                client = etcd.member(leader)
                return client, await client.member_list(linearizable=False), True
        client, members = await etcd.member_list(urls)
        return client, members, False

    async def local_member(self) -> int | None:
        """The member id our own store answers as, or None while it does not run (or answer)."""
        try:
            return (await self.local.status(timeout=1.0)).member_id
        except EtcdClientError:
            return None

    def ordinals(self, members: Sequence[Member]) -> dict[int, int | None]:
        return {m.id: self.settings.naming.ordinal_of_member(m.name, m.peer_urls) for m in members}

    async def member_remove(self, client: MemberClient, member_id: int) -> EtcdClientError | None:
        """One MemberRemove, never retried here; etcd's refusal is returned for the caller to judge."""
        try:
            await client.remove(member_id)
        except EtcdClientError as exc:
            self.count("remove", False)
            return exc
        self.count("remove", True)
        return None

    async def move_leader(self, target: int, where: str) -> bool:
        """One MoveLeader from our own member (it leads), never retried; a refusal is shown as `where`'s error."""
        try:
            await self.local.move_leader(target, timeout=5.0)
        except EtcdClientError as exc:
            self.count("move_leader", False)
            self.report(f"{where}: move leader", exc)
            return False
        self.count("move_leader", True)
        log.info("%s: leadership moved to %x", where, target)
        return True

    async def close(self) -> None:
        if self._etcd is not None:
            await self._etcd.close()
        await self.kube.close()
