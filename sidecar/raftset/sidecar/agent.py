"""The sidecar's state and run loop; each lifecycle step is a shell of its own.

Lifecycle: join (Joiner, until the startup file is written) -> heartbeat (HeartbeatPublisher),
promote (Promoter), clean (Cleaner) and, on the leader, membership (MembershipPublisher)
loops -> leave (Leaver, on /leave or SIGTERM).
Each shell gathers state, asks its pure module (join, heartbeat, clean, membership, leave), carries
out one step. Errors never end the process: they are logged, shown on /startup and
/readyz, and retried after a capped backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from raftset.etcdclient import (
    ClientTLS,
    ClusterClient,
    EtcdClientError,
    Member,
    MemberClient,
    Status,
    TLSConfigError,
)
from raftset.sidecar import heartbeat, marker
from raftset.sidecar.cleaner import Cleaner
from raftset.sidecar.config import Settings
from raftset.sidecar.joiner import Joiner
from raftset.sidecar.kube import Kube
from raftset.sidecar.leaver import Leaver
from raftset.sidecar.membership_publisher import MembershipPublisher
from raftset.sidecar.metrics import Metrics
from raftset.sidecar.plumbing import RETRYABLE
from raftset.sidecar.promoter import Promoter
from raftset.sidecar.publisher import HeartbeatPublisher

log = logging.getLogger("raftset.sidecar")


class Agent:
    def __init__(self, settings: Settings, kube: Kube) -> None:
        self.settings = settings
        self.kube = kube
        self.metrics = Metrics()
        self.phase = "joining"  # joining | started | leaving | left
        self.startup_written = False
        self.last_error = ""
        self.status: Status | None = None
        self.member_id: int | None = None
        self.heartbeat = heartbeat.beat(settings.pod_name, None, datetime.now(timezone.utc))
        self.workload_owner: dict[str, Any] | None = None  # the heartbeat Lease goes with the workload
        self.stopping = asyncio.Event()
        self._etcd: ClusterClient | None = None
        self.joiner = Joiner(self)
        self.publisher = HeartbeatPublisher(self)
        self.promoter = Promoter(self)
        self.cleaner = Cleaner(self)
        self.membership_publisher = MembershipPublisher(self)
        self.leaver = Leaver(self)

    # ---- shared plumbing of the shells

    def etcd(self) -> ClusterClient:
        """The etcd clients, created once the TLS files (if any) load."""
        if self._etcd is None:
            tls = ClientTLS.load(self.settings.tls) if self.settings.tls else None
            self._etcd = ClusterClient(tls, timeout=5.0, linearizable_member_list=(
                self.settings.engine.capabilities.linearizable_member_list))
        return self._etcd

    @property
    def local(self) -> MemberClient:
        return self.etcd().member(self.settings.client_url)

    @property
    def ready(self) -> bool:
        st = self.status
        return (self.phase == "started" and st is not None and not st.is_learner and st.leader != 0
                and not st.errors)

    def error(self, where: str, exc: BaseException) -> None:
        message = f"{where}: {exc}"
        if isinstance(exc, TLSConfigError):
            message = f"{where}: bad TLS material: {exc}"
        if message != self.last_error:
            log.error("%s", message)
        else:
            log.debug("%s (again)", message)
        self.last_error = message

    async def sleep(self, seconds: float) -> bool:
        """Sleep unless stopping; True if the sidecar is stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), timeout=seconds)
        return self.stopping.is_set()

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
        answers = await self.etcd().statuses(urls.values(), timeout=2.0)
        out: dict[int, Status | None] = {}
        for m in members:
            st = answers.get(urls.get(m.id, ""))
            out[m.id] = st if st is not None and st.member_id == m.id else None
        return out

    def ordinals(self, members: Sequence[Member]) -> dict[int, int | None]:
        return {m.id: self.settings.naming.ordinal_of_member(m.name, m.peer_urls) for m in members}

    async def member_remove(self, client: MemberClient, member_id: int) -> EtcdClientError | None:
        """One MemberRemove, never retried here; etcd's refusal is returned for the caller to judge."""
        try:
            await client.remove(member_id)
        except EtcdClientError as exc:
            self.metrics.count("remove", False)
            return exc
        self.metrics.count("remove", True)
        return None

    def remember_member(self, member_id: int, cluster: dict[str, str]) -> None:
        """Our member id, in memory and in the data volume's marker (stale-PVC detection reads it)."""
        settings = self.settings
        self.member_id = member_id
        marker.write(settings.marker_path, marker.Marker(member_id, settings.pod_name, settings.peer_url, cluster))

    # ---- lifecycle

    async def run(self) -> None:
        await self.joiner.run()
        if self.stopping.is_set():
            return
        tasks = [
            asyncio.create_task(self._loop(self.settings.poll_interval, self.publisher.beat_once, "heartbeat")),
            asyncio.create_task(self.promoter.run()),
            asyncio.create_task(self._loop(self.settings.clean_interval, self.cleaner.once, "clean")),
            asyncio.create_task(self._loop(self.settings.poll_interval, self.membership_publisher.once,
                                           "membership")),
        ]
        await self.stopping.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _loop(self, interval: float, step: Callable[[], Awaitable[None]], name: str) -> None:
        while not self.stopping.is_set():
            try:
                await step()
            except RETRYABLE as exc:
                self.error(name, exc)
            if await self.sleep(interval):
                return

    async def leave(self, trigger: str) -> dict[str, Any]:
        return await self.leaver.leave(trigger)

    def stop(self) -> None:
        self.stopping.set()

    async def close(self) -> None:
        if self._etcd is not None:
            await self._etcd.close()
        await self.kube.close()


async def leave_then_stop(agent: Agent, trigger: str) -> None:
    """SIGTERM: leave if /leave did not run yet, then stop."""
    with contextlib.suppress(Exception):
        await agent.leave(trigger)
    agent.stop()
