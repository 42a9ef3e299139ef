"""The promote shell: a learner asks to vote as soon as etcd accepts it.

Until the store answers as a voter its status is polled here, at the pace `promotion`
decides (faster than the heartbeat). Promotion goes through MemberList first, so a voter
is never asked to be promoted (Xline's server panics on that).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from raftset.sidecar.io.etcdclient import EtcdClientError, Refusal, Status
from raftset.sidecar.pure import promotion
from raftset.sidecar.shells.plumbing import RETRYABLE, Shell

if TYPE_CHECKING:
    from raftset.sidecar.agent import Agent

log = logging.getLogger("raftset.sidecar")


class Promoter(Shell):

    def __init__(self, agent: Agent) -> None:
        super().__init__(agent)
        self.backoff = promotion.refused_backoff()

    async def round(self) -> float:
        """One round of the supervised promote loop; returns the delay before the next."""
        agent = self.agent
        if promotion.polling(agent.phase, agent.status):
            await agent.publisher.beat_once()  # not yet voting: poll (and publish) at the promote pace
        step = promotion.next_step(agent.phase, agent.status, self.settings.poll_interval)
        if isinstance(step, promotion.Wait):
            if step.voting:
                self.backoff.reset()
            return step.seconds
        try:
            if await self.once(step.learner):
                self.backoff.reset()
                return 0.0
        except RETRYABLE as exc:
            agent.error("promote", exc)
        return self.backoff.next()

    async def once(self, status: Status) -> bool:
        agent = self.agent
        kept = await agent.kept()
        client, members = await agent.etcd().member_list(agent.candidates(kept, []))
        own = next((m for m in members if m.id == status.member_id), None)
        if own is None or not own.is_learner:
            return False
        try:
            await client.promote(own.id)
        except EtcdClientError as exc:
            if exc.refusal in (Refusal.LEARNER_NOT_READY, Refusal.NOT_A_LEARNER):
                log.info("promote %s: %s", own.hex_id, exc.message)
                agent.metrics.count("promote", exc.refusal is Refusal.NOT_A_LEARNER)
                return False
            agent.metrics.count("promote", False)
            raise
        agent.metrics.count("promote", True)
        log.info("promoted member %s to voting member", own.hex_id)
        await agent.publisher.beat_once()  # the operator waits for this voter: tell it now
        return True
