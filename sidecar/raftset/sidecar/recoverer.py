"""The quorum-loss recovery shell: read the operator's record, carry out recovery.decide's step.

Runs inside the join loop, before the normal join decides (`before_join`), and, on the
survivor, once more after its store started alone (`settle`): the startup file loses
`force-new-cluster` and the marker records the recovery, so neither a store restart nor a
pod restart forces a new cluster twice. Before the survivor forces, it asks every other pod's
member for Status at that moment (`peer_statuses`): the decision refuses while one has a leader.
"""

from __future__ import annotations

import logging
from typing import Any

from raftset import contract
from raftset.etcdclient import EtcdClientError, Member, Status
from raftset.quorumloss import RecoveryRecord, parse_record
from raftset.sidecar import datadir, heartbeat, marker, recovery
from raftset.sidecar.plumbing import API_ERRORS, RETRYABLE, Shell

log = logging.getLogger("raftset.sidecar")


class Recoverer(Shell):
    forced: RecoveryRecord | None = None  # set once this pod's store was told to start alone
    refused: str = ""  # the last refusal told in an Event: each one is told once, not every round

    @staticmethod
    def record(workload: dict[str, Any] | None) -> RecoveryRecord | None:
        annotations = ((workload or {}).get("metadata") or {}).get("annotations") or {}
        return parse_record(annotations.get(contract.ANNOTATION_QUORUM_RECOVERY))

    async def peer_statuses(self, workload: dict[str, Any] | None, record: RecoveryRecord) -> list[Status]:
        """Status of every other pod's member that answers now; asked only by the survivor, before it forces."""
        if record.survivor != self.settings.pod_name:
            return []
        kept = self.settings.backend.kept(workload) if workload else []
        urls = self.agent.candidates(kept, await self.agent.kube.member_leases(self.settings.cluster))
        # A peer that does not answer in time is counted as having no leader to offer.
        answers = await self.agent.etcd().statuses(urls, timeout=self.settings.peer_status_timeout)
        return [st for st in answers.values() if st is not None]

    async def survivor_members(self, record: RecoveryRecord) -> list[Member] | None:
        """MemberList from the survivor alone: the old members' views are what was lost."""
        if record.survivor == self.settings.pod_name:
            return None
        try:
            url = self.settings.naming.client_url(contract.ordinal_of(record.survivor))
        except ValueError:
            return None
        try:
            _, members = await self.agent.etcd().member_list([url])
        except EtcdClientError:
            return None
        return members

    async def before_join(self) -> bool | None:
        """None: no recovery concerns this pod, the normal join decides; else whether it progressed."""
        agent, settings = self.agent, self.settings
        workload = await agent.workload()
        record = self.record(workload)
        if record is None:
            return None
        view = recovery.RecoveryView(
            name=settings.pod_name, peer_url=settings.peer_url, record=record,
            has_data=marker.has_data(settings.data_dir), marker=marker.read(settings.marker_path),
            force_supported=settings.engine.capabilities.force_new_cluster,
            survivor_members=await self.survivor_members(record),
            peers=await self.peer_statuses(workload, record),
        )
        decision = recovery.decide(view)
        log.info("recovery: %s (%s)", decision.action.value, decision.reason)
        action = recovery.Action
        if decision.action is action.NONE:
            return None
        if decision.action is action.WAIT:
            agent.last_error = f"waiting: {decision.reason}"
            return False
        if decision.action is action.REFUSE:
            agent.error("recovery", RuntimeError(decision.reason))
            await self._tell_refusal(workload, decision.reason)
            return False
        if decision.action is action.MOVE_ASIDE:
            dest = datadir.move_aside(settings.data_dir, settings.marker_path, decision.reason,
                                      keep_as=datadir.quorum_loss_name(record.id))
            log.warning("data dir moved aside to %s (kept): %s", dest, decision.reason)
            return True
        assert decision.action is action.FORCE
        self.forced = record
        agent.joiner.write_startup("existing", {settings.pod_name: settings.peer_url}, force_new_cluster=True)
        log.warning("quorum-loss recovery %s: this member starts alone from its data (force-new-cluster)", record.id)
        return True

    async def _tell_refusal(self, workload: dict[str, Any] | None, reason: str) -> None:
        """A Warning Event about the cluster, once per refusal; a failed post is only logged (and told again)."""
        if reason == self.refused:
            return
        try:
            subject = heartbeat.event_subject(workload, self.settings.namespace)
            if subject is not None:
                await self.agent.kube.post_event(subject, warning=True, reason="QuorumRecoveryRefused",
                                                 message=f"{self.settings.pod_name}: {reason}",
                                                 component=self.settings.pod_name)
                self.refused = reason
        except API_ERRORS as exc:
            self.agent.error("recovery event", exc)

    async def settle(self) -> None:
        """Once the forced store leads alone: drop the flag from the startup file, record it in the marker."""
        agent, settings = self.agent, self.settings
        record = self.forced
        assert record is not None
        while not agent.stopping.is_set():
            try:
                status = await agent.local.status(timeout=2.0)
                if status.is_leader:
                    # The marker first: a sidecar killed in between restarts as an ordinary member
                    # (and rewrites the startup file); the other order could force a second time.
                    agent.remember_member(status.member_id, recovered=record.id)
                    agent.joiner.write_startup("existing", {settings.pod_name: settings.peer_url})
                    log.warning("quorum-loss recovery %s: member %x leads a one-member cluster (term %d, "
                                "index %d); later restarts are ordinary", record.id, status.member_id,
                                status.raft_term, status.raft_index)
                    self.forced = None
                    return
            except EtcdClientError as exc:
                log.debug("recovery settle: the store does not answer yet: %s", exc)
            except RETRYABLE as exc:
                agent.error("recovery settle", exc)
            if await agent.sleep(settings.poll_interval):
                return
