"""The membership-clean shell: only the leader's sidecar acts, one removal per round, under the lock."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from raftset.sidecar.io.etcdclient import EtcdClientError, Member
from raftset.sidecar.io.peers import Peers
from raftset.sidecar.metrics import STEP_CLEAN, Metrics
from raftset.sidecar.pure import clean
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells.plumbing import LOCK_NAME
from raftset.workloads import being_deleted

log = logging.getLogger("raftset.sidecar")


class CleanShell:
    """Leader-only (the app's loop table). Port: `hold`, the test-only hold at a named point (Loops.test_hold)."""

    def __init__(self, settings: SidecarConfig, state: State, peers: Peers, metrics: Metrics, *,
                 hold: Callable[[str], Awaitable[None]]) -> None:
        self.settings, self.state, self.peers, self.metrics = settings, state, peers, metrics
        self.hold = hold
        self.absent_since: dict[int, float] = {}

    def not_leading(self) -> None:
        self.absent_since = {}  # a new leader starts the clock afresh

    async def round(self) -> None:
        settings = self.settings
        workload = await self.peers.workload()
        if workload is None or being_deleted(workload):
            return
        kept = settings.backend.kept(workload)
        now = time.monotonic()
        members = await self.peers.local.member_list()
        decision = await self._decide(members, kept, now, track=True)
        log.debug("clean: %s", decision.reason)
        if decision.remove is None:
            self.metrics.outcome(STEP_CLEAN, "none")
            return
        async with self.peers.local.lock(LOCK_NAME, timeout=10) as held:
            await self.hold("clean-locked")
            again = await self._decide(await self.peers.local.member_list(), kept, now, track=False)
            if again.remove != decision.remove:
                self.metrics.outcome(STEP_CLEAN, "changed")
                return
            await held.fence(self.peers.local.timeout)  # LockLost unless the lock outlives the MemberRemove
            try:
                await self.peers.local.remove(decision.remove)
            except EtcdClientError:
                self.metrics.count("clean_remove", False)
                self.metrics.outcome(STEP_CLEAN, "error")
                raise
        self.metrics.count("clean_remove", True)
        self.metrics.outcome(STEP_CLEAN, "removed")
        self.absent_since.pop(decision.remove, None)
        log.warning("clean: removed member %x (ordinal %s): %s", decision.remove,
                    self.peers.ordinals(members).get(decision.remove), decision.reason)

    async def _decide(self, members: Sequence[Member], kept: Sequence[int], now: float, *,
                      track: bool) -> clean.CleanDecision:
        """clean.decide on what the members answer now; `track` moves the absence clock first."""
        statuses = await self.peers.statuses(members)
        answering = frozenset(i for i, st in statuses.items() if st is not None)
        if track:
            self.absent_since = clean.absences(self.absent_since, members, answering, now)
        return clean.decide(leading=True, members=members, ordinal_of=self.peers.ordinals(members), kept=kept,
                          absent_since=self.absent_since, answering=answering, now=now,
                          grace=self.settings.clean_grace)
