"""The promote shell: a learner asks to vote as soon as etcd accepts it.

Until the store answers as a voter its status is polled here, at the pace `promotion`
decides (faster than the heartbeat). Promotion goes through MemberList first, so a voter
is never asked to be promoted (Xline's server panics on that).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from raftset.sidecar.io.etcdclient import EtcdClientError, Refusal, Status
from raftset.sidecar.io.peers import Peers
from raftset.sidecar.metrics import Metrics
from raftset.sidecar.pure import promotion
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells.plumbing import RETRYABLE, report

log = logging.getLogger("raftset.sidecar")


class PromotionShell:
    """Port: `publish_now`, the heartbeat shell's round (a poll of our member, published)."""

    def __init__(self, settings: SidecarConfig, state: State, peers: Peers, metrics: Metrics, *,
                 publish_now: Callable[[], Awaitable[None]]) -> None:
        self.settings, self.state, self.peers, self.metrics = settings, state, peers, metrics
        self.publish_now = publish_now
        self.backoff = promotion.refused_backoff()

    async def round(self) -> float:
        """One round of the supervised promote loop; returns the delay before the next."""
        if promotion.polling(self.state.phase, self.state.status):
            await self.publish_now()  # not yet voting: poll (and publish) at the promote pace
        decision = promotion.next_round(self.state.phase, self.state.status, self.settings.poll_interval)
        if isinstance(decision, promotion.Wait):
            if decision.voting:
                self.backoff.reset()
            return decision.seconds
        try:
            if await self.promote(decision.learner):
                self.backoff.reset()
                return 0.0
        except RETRYABLE as exc:
            report(self.state, "promote", exc)
        return self.backoff.next()

    async def promote(self, status: Status) -> bool:
        kept = await self.peers.kept()
        client, members = await self.peers.etcd().member_list(self.peers.candidates(kept, []))
        own = next((m for m in members if m.id == status.member_id), None)
        if own is None or not own.is_learner:
            return False
        try:
            await client.promote(own.id)
        except EtcdClientError as exc:
            if exc.refusal in (Refusal.LEARNER_NOT_READY, Refusal.NOT_A_LEARNER):
                log.info("promote %s: %s", own.hex_id, exc.message)
                self.metrics.count("promote", exc.refusal is Refusal.NOT_A_LEARNER)
                return False
            self.metrics.count("promote", False)
            raise
        self.metrics.count("promote", True)
        log.info("promoted member %s to voting member", own.hex_id)
        await self.publish_now()  # the operator waits for this voter: tell it now
        return True
