"""The membership shell: the leader's sidecar reads the membership and writes the membership Lease.

Only the leader publishes, so the record is the membership as the leader sees it. The
members' Statuses (their raft indexes) are asked for only when a write is due.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from raftset.membership import RaftMembership
from raftset.sidecar.pure import membership
from raftset.sidecar.shells.plumbing import API_ERRORS, Shell

if TYPE_CHECKING:
    from raftset.sidecar.agent import Agent

log = logging.getLogger("raftset.sidecar")


class MembershipPublisher(Shell):
    def __init__(self, agent: Agent) -> None:
        super().__init__(agent)
        self.written: RaftMembership | None = None
        self.written_at: float | None = None

    async def once(self) -> None:
        agent, settings = self.agent, self.settings
        if agent.phase != "started" or agent.status is None or not agent.status.is_leader:
            self.written = self.written_at = None  # leading again later publishes at once
            agent.index_lags = {}  # only the leader reports them
            return
        leader = await agent.local.status()
        if not leader.is_leader:
            return
        members = await agent.local.member_list()
        ordinals = agent.ordinals(members)
        now = time.monotonic()
        draft = membership.record(leader, settings.pod_name, members, {}, ordinals, datetime.now(timezone.utc))
        if not membership.should_publish(self.written, draft, self.written_at, now, settings.heartbeat_interval):
            return
        statuses = await agent.statuses(members)
        current = membership.record(leader, settings.pod_name, members, statuses, ordinals,
                                    datetime.now(timezone.utc))
        agent.index_lags = membership.index_lags(current, settings.cluster)
        body = membership.lease_body(settings.cluster, settings.namespace, current,
                                     duration=settings.lease_duration,
                                     owner=agent.cluster_owner)
        try:
            await agent.kube.apply_lease(body)
        except API_ERRORS as exc:
            agent.metrics.count("membership_write", False)
            agent.error("membership lease", exc)
            return
        agent.metrics.count("membership_write", True)
        if self.written is None or self.written.change_key != current.change_key:
            log.info("membership: published %d member(s) at index %d, term %d", len(current.members),
                     current.index, current.term)
        self.written, self.written_at = current, now
