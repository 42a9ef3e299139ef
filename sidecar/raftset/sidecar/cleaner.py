"""The membership-clean shell: only the leader's sidecar acts, one removal per round, under the lock."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from raftset.etcdclient import EtcdClientError, Member
from raftset.sidecar import clean
from raftset.sidecar.metrics import STEP_CLEAN
from raftset.sidecar.plumbing import LOCK_NAME, Shell
from raftset.workloads import being_deleted

if TYPE_CHECKING:
    from raftset.sidecar.agent import Agent

log = logging.getLogger("raftset.sidecar")


class Cleaner(Shell):
    def __init__(self, agent: Agent) -> None:
        super().__init__(agent)
        self.absent_since: dict[int, float] = {}  # a new leader starts the clock afresh

    async def once(self) -> None:
        agent, settings = self.agent, self.settings
        status = agent.status
        if agent.phase != "started" or status is None or not status.is_leader:
            self.absent_since = {}
            return
        workload = await agent.workload()
        if workload is None or being_deleted(workload):
            return
        kept = settings.backend.kept(workload)
        now = time.monotonic()
        members = await agent.local.member_list()
        decision = await self._decide(members, kept, now, track=True)
        log.debug("clean: %s", decision.reason)
        if decision.remove is None:
            agent.metrics.outcome(STEP_CLEAN, "none")
            return
        async with agent.local.lock(LOCK_NAME, timeout=10) as held:
            await agent.loops.test_hold("clean-locked")
            again = await self._decide(await agent.local.member_list(), kept, now, track=False)
            if again.remove != decision.remove:
                agent.metrics.outcome(STEP_CLEAN, "changed")
                return
            await held.fence(agent.local.timeout)  # LockLost unless the lock outlives the MemberRemove
            try:
                await agent.local.remove(decision.remove)
            except EtcdClientError:
                agent.metrics.count("clean_remove", False)
                agent.metrics.outcome(STEP_CLEAN, "error")
                raise
        agent.metrics.count("clean_remove", True)
        agent.metrics.outcome(STEP_CLEAN, "removed")
        self.absent_since.pop(decision.remove, None)
        log.warning("clean: removed member %x (ordinal %s): %s", decision.remove,
                    agent.ordinals(members).get(decision.remove), decision.reason)

    async def _decide(self, members: Sequence[Member], kept: Sequence[int], now: float, *,
                      track: bool) -> clean.CleanDecision:
        """clean.decide on what the members answer now; `track` moves the absence clock first."""
        statuses = await self.agent.statuses(members)
        answering = frozenset(i for i, st in statuses.items() if st is not None)
        if track:
            self.absent_since = clean.absences(self.absent_since, members, answering, now)
        return clean.decide(leading=True, members=members, ordinal_of=self.agent.ordinals(members), kept=kept,
                          absent_since=self.absent_since, answering=answering, now=now,
                          grace=self.settings.clean_grace)
