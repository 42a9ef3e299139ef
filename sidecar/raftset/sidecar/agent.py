"""The sidecar's state and run loop; each lifecycle step is a shell of its own.

Lifecycle: join (Joiner, until the startup file is written; a quorum-loss recovery's step,
Recoverer, comes first) -> heartbeat (HeartbeatPublisher),
promote (Promoter), clean (Cleaner) and, on the leader, membership (MembershipPublisher),
backup (Backuper) and maintenance (Maintainer: alarms, compaction, defragmentation) loops ->
leave (Leaver, on /leave or SIGTERM). A cluster seeded from a backup restores it during join,
before the first member's startup file is written (Restorer).
Each shell gathers state, asks its pure module (join, heartbeat, clean, membership, leave), carries
out one step. Errors never end the process: they are logged, shown on /startup and
/readyz, and retried after a capped backoff. The background loops run under supervision
(supervision.py): a loop that died or made no progress within its bound fails /livez.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from raftset.etcdclient import (
    Alarm,
    ClientTLS,
    ClusterClient,
    EtcdClientError,
    Member,
    MemberClient,
    Status,
    TLSConfigError,
)
from raftset.sidecar import backuper, corruption, heartbeat, marker, readiness
from raftset.sidecar.backuper import Backuper
from raftset.sidecar.cleaner import Cleaner
from raftset.sidecar.config import Settings
from raftset.sidecar.joiner import Joiner
from raftset.sidecar.kube import Kube
from raftset.sidecar.leaver import Leaver
from raftset.sidecar.maintainer import Maintainer
from raftset.sidecar.membership_publisher import MembershipPublisher
from raftset.sidecar.metrics import Metrics, agent_state
from raftset.sidecar.promoter import Promoter
from raftset.sidecar.readiness import Readiness
from raftset.sidecar.publisher import HeartbeatPublisher
from raftset.sidecar.recoverer import Recoverer
from raftset.sidecar.repairer import Repairer
from raftset.sidecar.restorer import Restorer
from raftset.sidecar.supervision import Loops

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
        self.read_error: str | None = readiness.NOT_READ_YET  # the last linearizable read's failure
        self.member_id: int | None = None
        self.heartbeat = heartbeat.beat(settings.pod_name, None, datetime.now(timezone.utc), serving=self.readiness)
        self.workload_owner: dict[str, Any] | None = None  # the heartbeat Lease goes with the workload
        # The membership Lease goes with the cluster object: it must outlive a deleted workload.
        self.cluster_owner: dict[str, Any] | None = None
        self.alarms: tuple[str, ...] = ()  # this member's active alarms, as the maintenance shell last read them
        self.cluster_alarms: tuple[Alarm, ...] = ()  # every active alarm, as the maintenance shell last read them
        self.index_lags: dict[str, int] = {}  # by member pod; the leader's sidecar fills it
        self.corruption: corruption.Record | None = None  # the leader's standing verdict on our member (Repairer)
        self.stopping = asyncio.Event()
        self._etcd: ClusterClient | None = None
        self.recoverer = Recoverer(self)
        self.joiner = Joiner(self)
        self.publisher = HeartbeatPublisher(self)
        self.promoter = Promoter(self)
        self.cleaner = Cleaner(self)
        self.membership_publisher = MembershipPublisher(self)
        self.leaver = Leaver(self)
        self.loops = Loops(settings.loop_stall, on_error=self._loop_error)
        self.backuper = Backuper(self)
        self.restorer = Restorer(self)
        self.maintainer = Maintainer(self)
        self.metrics.watch(lambda: agent_state(self))
        self.repairer = Repairer(self)

    # ---- shared plumbing of the shells

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

    @property
    def readiness(self) -> Readiness:
        return readiness.readiness(self.phase, self.status, self.read_error)

    @property
    def ready(self) -> bool:
        return self.readiness.ready

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
            self.metrics.count("remove", False)
            return exc
        self.metrics.count("remove", True)
        return None

    async def move_leader(self, target: int, where: str) -> bool:
        """One MoveLeader from our own member (it leads), never retried; a refusal is shown as `where`'s error."""
        try:
            await self.local.move_leader(target, timeout=5.0)
        except EtcdClientError as exc:
            self.metrics.count("move_leader", False)
            self.error(f"{where}: move leader", exc)
            return False
        self.metrics.count("move_leader", True)
        log.info("%s: leadership moved to %x", where, target)
        return True

    def remember_member(self, member_id: int, cluster: dict[str, str] | None = None,
                        recovered: str | None = None) -> None:
        """Our member id, in memory and in the data volume's marker (stale-PVC detection reads it);
        what is not given carries over from the marker (marker.remembered)."""
        settings = self.settings
        self.member_id = member_id
        marker.write(settings.marker_path, marker.remembered(
            marker.read(settings.marker_path), member_id, settings.pod_name, settings.peer_url,
            cluster=cluster, recovered=recovered))

    # ---- lifecycle

    async def run(self) -> None:
        await self.joiner.run()
        if self.stopping.is_set():
            return
        poll, clean = self.settings.poll_interval, self.settings.clean_interval
        loops = {
            "heartbeat": (poll, self.publisher.beat_once),
            "promote": (poll, self.promoter.round),
            "clean": (clean, self.cleaner.once),
            "membership": (poll, self.membership_publisher.once),
            backuper.LOOP: (self.settings.backup_interval, self.backuper.once),
            "maintenance": (self.settings.maintenance_interval, self.maintainer.once),
            "repair": (self.settings.poll_interval, self.repairer.once),
        }
        tasks = [asyncio.create_task(self.loops.run(name, interval, step, self.stopping), name=name)
                 for name, (interval, step) in loops.items()]
        if self.recoverer.forced is not None:
            tasks.append(asyncio.create_task(self.recoverer.settle(), name="recovery-settle"))
        await self.stopping.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _loop_error(self, loop: str, kind: str, exc: BaseException) -> None:
        """Supervision's report of a failed round, shown on /readyz (supervision counted it, and logged an
        unexpected one)."""
        if kind == "expected":
            self.error(loop, exc)
        else:  # supervision retries the round after its backoff
            self.last_error = f"{loop}: unexpected {type(exc).__name__}: {exc}"

    async def rejoin(self, reason: str) -> None:
        """The join's premise failed (our member left Raft): decide the join again, from scratch.

        The startup file goes first, so the store's next start cannot run the removed member
        again; the join then moves the old data aside (on a linearizable answer only) and adds
        a new learner, exactly as for a new pod.
        """
        log.warning("deciding the join again: %s", reason)
        self.phase = "joining"
        self.startup_written = False
        self.member_id = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.settings.startup_path)
        await self.joiner.run()  # the supervised promote loop then promotes the new learner

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
