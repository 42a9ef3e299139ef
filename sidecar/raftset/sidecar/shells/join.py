"""The join shell: gather what join.decide needs, carry out one step, decide again.

Runs until the startup file is written. A crash between steps is never worse than a
fresh start: every step is decided from what etcd, the API and the data dir say now, and
membership changes are decided once more under the membership lock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable

from raftset import contract
from raftset.sidecar.io import datadir, marker
from raftset.sidecar.io.etcdclient import EtcdClientError, Member, MemberClient, Refusal
from raftset.sidecar.io.kube import KubeError, SidecarKube
from raftset.sidecar.io.peers import Peers
from raftset.sidecar.io.startup import DataVolume
from raftset.sidecar.metrics import STEP_JOIN, Metrics
from raftset.sidecar.pure import heartbeat, join, replace
from raftset.sidecar.pure.backoff import Backoff
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.removal_guard import may_remove
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells.plumbing import LOCK_NAME, RETRYABLE, report, sleep

log = logging.getLogger("raftset.sidecar")


class JoinShell:
    """Ports: `quorum_loss` (a quorum-loss recovery's round, before the join decides: None when none
    concerns this pod, else whether it progressed) and `restore` (True once a backup this member
    bootstraps from is in place, or none is asked)."""

    def __init__(self, settings: SidecarConfig, state: State, peers: Peers, kube: SidecarKube, metrics: Metrics,
                 volume: DataVolume, stopping: asyncio.Event, *, quorum_loss: Callable[[], Awaitable[bool | None]],
                 restore: Callable[[], Awaitable[bool]]) -> None:
        self.settings, self.state, self.peers, self.kube, self.metrics = settings, state, peers, kube, metrics
        self.volume, self.stopping = volume, stopping
        self.quorum_loss, self.restore = quorum_loss, restore

    async def run(self) -> None:
        backoff = Backoff(0.5, 10.0)
        while not self.stopping.is_set():
            self.metrics.join_attempt()
            try:
                progressed = await self.round()
            except RETRYABLE as exc:
                report(self.state, "join", exc)
                self.metrics.outcome(STEP_JOIN, "error")
                progressed = False
            if self.state.startup_written:
                self.state.last_error = ""
                return
            if progressed:
                backoff.reset()
                continue
            delay = backoff.next()
            log.info("join: no progress; next attempt in %.2f s", delay)
            if await sleep(self.stopping, delay):
                return

    async def view(self) -> tuple[join.JoinView, MemberClient | None, list[str]]:
        settings = self.settings
        self.peers.etcd()  # loads the TLS files: bad ones stop the join here, with a clear error
        workload = await self.peers.workload()
        if workload is None:
            raise KubeError("GET", f"workload {settings.workload_name}", 404, "not found (yet)")
        self.state.workload_owner = heartbeat.owner_reference(workload)
        self.state.cluster_owner = heartbeat.cluster_owner(workload)
        kept = settings.backend.kept(workload)
        leases = await self.kube.member_leases(settings.cluster)
        evidence = join.cluster_evidence(leases, settings.pod_name)
        urls = self.peers.candidates(kept, leases)
        client: MemberClient | None = None
        members: list[Member] | None = None
        linearizable = False
        if urls:
            try:
                client, members, linearizable = await self.peers.authoritative_members(urls)
            except EtcdClientError as exc:
                # Expected while a new cluster bootstraps; worth a warning once one exists.
                log.log(logging.WARNING if evidence else logging.INFO,
                        "no member answered MemberList at %s: %s", ", ".join(urls), exc)
        alone = settings.engine.capabilities.bootstrap_alone
        formed = False
        if not alone and urls:
            # The initial set bootstraps together only while no member ever had a leader.
            answers = await self.peers.etcd().statuses(urls, timeout=settings.peer_status_timeout)
            formed = join.cluster_formed(leases, settings.pod_name, [st for st in answers.values() if st is not None])
        view = join.JoinView(
            name=settings.pod_name, ordinal=settings.ordinal, peer_url=settings.peer_url, kept=kept,
            has_data=marker.has_data(settings.data_dir), marker=marker.read(settings.marker_path),
            members=members, cluster_evidence=evidence, linearizable=linearizable,
            local_member=await self.peers.local_member(), bootstrap_alone=alone,
            initial_peers={} if alone else settings.naming.initial_cluster(kept), formed=formed,
        )
        return view, client, urls

    async def round(self) -> bool:
        """One decision and at most one change; True if it made progress."""
        settings = self.settings
        recovered = await self.quorum_loss()
        if recovered is not None:
            return recovered
        view, client, urls = await self.view()
        decision = join.decide(view)
        log.info("join: %s (%s)", decision.action.value, decision.reason)
        self.metrics.outcome(STEP_JOIN, decision.action.value)
        action = join.JoinAction
        if decision.action is action.BOOTSTRAP:
            # A cluster seeded from a backup: the snapshot is restored first, or nothing starts.
            if not await self.restore():
                return False
            self.volume.write_startup("new", join.bootstrap_cluster(view))
            return True
        if decision.action is action.REJOIN:
            cluster = join.rejoin_cluster(view, decision.member_id, settings.naming)
            if decision.member_id is not None:
                self.volume.remember_member(decision.member_id, cluster)
            self.volume.write_startup("existing", cluster)
            return True
        if decision.action is action.MOVE_ASIDE:
            dest = datadir.move_aside(settings.data_dir, settings.marker_path, decision.reason)
            log.warning("data dir moved aside to %s (kept until the new member votes): %s", dest, decision.reason)
            return True
        if decision.action is action.WAIT:
            self.state.last_error = f"waiting: {decision.reason}" + (f" (asked {', '.join(urls)})" if urls else "")
            return False
        assert client is not None and view.members is not None
        if decision.action is action.REUSE_ENTRY:
            assert decision.member_id is not None
            cluster = self.cluster_map(view.members, decision.member_id)
            self.volume.remember_member(decision.member_id, cluster)
            self.volume.write_startup("existing", cluster)
            return True
        if decision.action is action.ADD_LEARNER:
            return await self.add_learner(client)
        if decision.action is action.REMOVE_ENTRY:
            assert decision.member_id is not None
            return await self.remove_entry(client, decision.member_id, decision.reason)
        raise AssertionError(decision.action)

    async def add_learner(self, client: MemberClient) -> bool:
        settings = self.settings
        async with client.lock(LOCK_NAME, timeout=10) as held:
            # Decide again under the lock: someone may have changed membership meanwhile.
            view, _, _ = await self.view()
            view = dataclasses.replace(view, members=await client.member_list(), linearizable=False)
            if join.decide(view).action is not join.JoinAction.ADD_LEARNER:
                return True
            await held.fence(client.timeout)  # LockLost unless the lock outlives the MemberAdd
            try:
                added, members = await client.add_learner(settings.peer_url)
            except EtcdClientError as exc:
                self.metrics.count("add", False)
                if exc.refusal is Refusal.TOO_MANY_LEARNERS:
                    self.state.last_error = "waiting: another learner is still joining"
                    return False
                # A lost reply may still have added us: the next MemberList will tell.
                raise
            self.metrics.count("add", True)
        log.info("added member %s as learner with peer URL %s", added.hex_id, settings.peer_url)
        cluster = self.cluster_map(members, added.id)
        self.volume.remember_member(added.id, cluster)
        self.volume.write_startup("existing", cluster)
        return True

    async def remove_entry(self, client: MemberClient, member_id: int, found: str) -> bool:
        """Remove the entry our empty data dir left behind, decided again under the lock; then record it on our
        pod as a replacement (a lost volume) that the replace shell finishes and the operator narrates."""
        async with client.lock(LOCK_NAME, timeout=10) as held:
            members = await client.member_list()
            if not may_remove(members, await self.peers.statuses(members), member_id):
                self.state.last_error = f"waiting: removing our old entry {member_id:x} would lose quorum"
                return False
            await held.fence(client.timeout)
            error = await self.peers.member_remove(client, member_id)
        if error is not None and error.refusal is not Refusal.MEMBER_NOT_FOUND:
            raise error
        log.warning("removed our old member entry %x: our data dir was empty", member_id)
        record = replace.lost_volume(member_id, found, uuid.uuid4().hex[:8])
        try:
            await self.kube.annotate_pod(self.settings.pod_name,
                                          {contract.ANNOTATION_REPLACE_PROGRESS: record.to_json()})
        except KubeError as exc:  # the join goes on; only its narration is lost
            log.warning("member %x removed, but its record could not be written on our pod: %s", member_id, exc)
        return True

    def cluster_map(self, members: list[Member], own_id: int | None) -> dict[str, str]:
        settings = self.settings
        return join.initial_cluster(settings.pod_name, settings.peer_url, members, settings.naming, own_id)
