"""The quorum-loss recovery shell: read the operator's record, carry out quorum_loss.decide's step.

Runs inside the join loop, before the normal join decides (`before_join`), and, on the
survivor, once more after its store started alone (`settle`): the startup file loses
`force-new-cluster` and the marker records the recovery, so neither a store restart nor a
pod restart forces a new cluster twice. Before the survivor forces, it asks every other pod's
member for Status at that moment (`peer_statuses`): the decision refuses while one has a leader.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from raftset import contract
from raftset.quorum_loss import QuorumLossRecord, parse_record
from raftset.sidecar.io import datadir, marker
from raftset.sidecar.io.etcdclient import EtcdClientError, Member, Status
from raftset.sidecar.io.kube import SidecarKube
from raftset.sidecar.io.peers import Peers
from raftset.sidecar.io.startup import DataVolume
from raftset.sidecar.pure import heartbeat, quorum_loss
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells.plumbing import API_ERRORS, RETRYABLE, report, sleep

log = logging.getLogger("raftset.sidecar")


class QuorumLossShell:
    def __init__(self, settings: SidecarConfig, state: State, peers: Peers, kube: SidecarKube, volume: DataVolume,
                 stopping: asyncio.Event) -> None:
        self.settings, self.state, self.peers, self.kube = settings, state, peers, kube
        self.volume, self.stopping = volume, stopping
        self.forced: QuorumLossRecord | None = None  # set once this pod's store was told to start alone
        self.refused = ""  # the last refusal told in an Event: each one is told once, not every round

    @staticmethod
    def record(workload: dict[str, Any] | None) -> QuorumLossRecord | None:
        annotations = ((workload or {}).get("metadata") or {}).get("annotations") or {}
        return parse_record(annotations.get(contract.ANNOTATION_QUORUM_RECOVERY))

    async def peer_statuses(self, workload: dict[str, Any] | None, record: QuorumLossRecord) -> list[Status]:
        """Status of every other pod's member that answers now; asked only by the survivor, before it forces."""
        if record.survivor != self.settings.pod_name:
            return []
        kept = self.settings.backend.kept(workload) if workload else []
        urls = self.peers.candidates(kept, await self.kube.member_leases(self.settings.cluster))
        # A peer that does not answer in time is counted as having no leader to offer.
        answers = await self.peers.etcd().statuses(urls, timeout=self.settings.peer_status_timeout)
        return [st for st in answers.values() if st is not None]

    async def survivor_members(self, record: QuorumLossRecord) -> list[Member] | None:
        """MemberList from the survivor alone: the old members' views are what was lost."""
        if record.survivor == self.settings.pod_name:
            return None
        try:
            url = self.settings.naming.client_url(contract.ordinal_of(record.survivor))
        except ValueError:
            return None
        try:
            _, members = await self.peers.etcd().member_list([url])
        except EtcdClientError:
            return None
        return members

    async def before_join(self) -> bool | None:
        """None: no recovery concerns this pod, the normal join decides; else whether it progressed."""
        settings = self.settings
        workload = await self.peers.workload()
        record = self.record(workload)
        if record is None:
            return None
        view = quorum_loss.QuorumLossView(
            name=settings.pod_name, peer_url=settings.peer_url, record=record,
            has_data=marker.has_data(settings.data_dir), marker=marker.read(settings.marker_path),
            force_supported=settings.engine.capabilities.force_new_cluster,
            survivor_members=await self.survivor_members(record),
            peers=await self.peer_statuses(workload, record),
        )
        decision = quorum_loss.decide(view)
        log.info("recovery: %s (%s)", decision.action.value, decision.reason)
        action = quorum_loss.QuorumLossAction
        if decision.action is action.NONE:
            return None
        if decision.action is action.WAIT:
            self.state.last_error = f"waiting: {decision.reason}"
            return False
        if decision.action is action.REFUSE:
            report(self.state, "recovery", RuntimeError(decision.reason))
            await self._tell_refusal(workload, decision.reason)
            return False
        if decision.action is action.MOVE_ASIDE:
            dest = datadir.move_aside(settings.data_dir, settings.marker_path, decision.reason,
                                      keep_as=datadir.quorum_loss_name(record.id))
            log.warning("data dir moved aside to %s (kept): %s", dest, decision.reason)
            return True
        assert decision.action is action.FORCE
        self.forced = record
        self.volume.write_startup("existing", {settings.pod_name: settings.peer_url}, force_new_cluster=True)
        log.warning("quorum-loss recovery %s: this member starts alone from its data (force-new-cluster)", record.id)
        return True

    async def _tell_refusal(self, workload: dict[str, Any] | None, reason: str) -> None:
        """A Warning Event about the cluster, once per refusal; a failed post is only logged (and told again)."""
        if reason == self.refused:
            return
        try:
            subject = heartbeat.event_subject(workload, self.settings.namespace)
            if subject is not None:
                await self.kube.post_event(subject, warning=True, reason="QuorumRecoveryRefused",
                                                 message=f"{self.settings.pod_name}: {reason}",
                                                 component=self.settings.pod_name)
                self.refused = reason
        except API_ERRORS as exc:
            report(self.state, "recovery event", exc)

    async def settle(self) -> None:
        """Once the forced store leads alone: drop the flag from the startup file, record it in the marker."""
        settings = self.settings
        record = self.forced
        assert record is not None
        while not self.stopping.is_set():
            try:
                status = await self.peers.local.status(timeout=2.0)
                if status.is_leader:
                    # The marker first: a sidecar killed in between restarts as an ordinary member
                    # (and rewrites the startup file); the other order could force a second time.
                    self.volume.remember_member(status.member_id, recovered=record.id)
                    self.volume.write_startup("existing", {settings.pod_name: settings.peer_url})
                    log.warning("quorum-loss recovery %s: member %x leads a one-member cluster (term %d, "
                                "index %d); later restarts are ordinary", record.id, status.member_id,
                                status.raft_term, status.raft_index)
                    self.forced = None
                    return
            except EtcdClientError as exc:
                log.debug("recovery settle: the store does not answer yet: %s", exc)
            except RETRYABLE as exc:
                report(self.state, "recovery settle", exc)
            if await sleep(self.stopping, settings.poll_interval):
                return
