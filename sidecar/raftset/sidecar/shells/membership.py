"""The membership shell: the leader's sidecar reads the membership and writes the membership Lease.

Only the leader publishes, so the record is the membership as the leader sees it. The
members' Statuses (their raft indexes) are asked for only when a write is due.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone

from raftset.membership import RaftMembership
from raftset.sidecar.io.kube import SidecarKube
from raftset.sidecar.io.peers import Peers
from raftset.sidecar.metrics import Metrics
from raftset.sidecar.pure import membership
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells.plumbing import API_ERRORS, report

log = logging.getLogger("raftset.sidecar")


class MembershipShell:
    """Leader-only (the app's loop table)."""

    def __init__(self, settings: SidecarConfig, state: State, peers: Peers, kube: SidecarKube, metrics: Metrics) -> None:
        self.settings, self.state, self.peers, self.kube, self.metrics = settings, state, peers, kube, metrics
        self.written: RaftMembership | None = None
        self.written_at: float | None = None

    def not_leading(self) -> None:
        self.written = self.written_at = None  # leading again later publishes at once
        self.state.index_lags = {}  # only the leader reports them

    async def round(self) -> None:
        settings = self.settings
        leader = await self.peers.local.status()
        if not leader.is_leader:
            return
        members = await self.peers.local.member_list()
        ordinals = self.peers.ordinals(members)
        now = time.monotonic()
        draft = membership.record(leader, settings.pod_name, members, {}, ordinals, datetime.now(timezone.utc))
        if not membership.should_publish(self.written, draft, self.written_at, now, settings.heartbeat_interval):
            return
        statuses = await self.peers.statuses(members)
        current = membership.record(leader, settings.pod_name, members, statuses, ordinals,
                                    datetime.now(timezone.utc))
        self.state.index_lags = membership.index_lags(current, settings.cluster)
        body = membership.lease_body(settings.cluster, settings.namespace, current,
                                     duration=settings.lease_duration,
                                     owner=self.state.cluster_owner)
        try:
            await self.kube.apply_lease(body)
        except API_ERRORS as exc:
            self.metrics.count("membership_write", False)
            report(self.state, "membership lease", exc)
            return
        self.metrics.count("membership_write", True)
        if self.written is None or self.written.change_key != current.change_key:
            log.info("membership: published %d member(s) at index %d, term %d", len(current.members),
                     current.index, current.term)
        self.written, self.written_at = current, now
