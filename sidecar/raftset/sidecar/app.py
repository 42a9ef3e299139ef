"""The sidecar's wiring: one State, the ports, every shell, and the loop table.

Lifecycle: join (JoinShell, until the startup file is written; a quorum-loss recovery's round,
QuorumLossShell, comes first) -> the supervised loops of the table below: heartbeat, promote, clean,
membership, backup, maintenance (alarms, compaction, defragmentation), repair (the replace shell) and,
where the engine abandons copies in a scratch volume, scratch -> leave (LeaveShell, on /leave or
SIGTERM). A cluster seeded from a backup restores it during join, before the first member's startup
file is written (RestoreShell).
Each shell gathers state, asks its pure module (raftset.sidecar.pure), carries out one step, and calls
other work only through the ports it was given here. Errors never end the process: they are logged,
shown on /startup and /readyz, and retried after a capped backoff. The background loops run under
supervision (supervision.py): a loop that died or made no progress within its bound fails /livez.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from raftset.sidecar.io.kube import SidecarKube
from raftset.sidecar.io.peers import Peers
from raftset.sidecar.io.startup import DataVolume
from raftset.sidecar.metrics import Metrics, member_gauges
from raftset.sidecar.pure import scratch
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells import backup
from raftset.sidecar.shells.backup import BackupShell
from raftset.sidecar.shells.clean import CleanShell
from raftset.sidecar.shells.heartbeat import HeartbeatShell
from raftset.sidecar.shells.join import JoinShell
from raftset.sidecar.shells.leave import LeaveShell
from raftset.sidecar.shells.maintenance import MaintenanceShell
from raftset.sidecar.shells.membership import MembershipShell
from raftset.sidecar.shells.plumbing import report
from raftset.sidecar.shells.promotion import PromotionShell
from raftset.sidecar.shells.quorum_loss import QuorumLossShell
from raftset.sidecar.shells.replace import ReplaceShell
from raftset.sidecar.shells.restore import RestoreShell
from raftset.sidecar.shells.scratch import ScratchShell
from raftset.sidecar.supervision import Loops, Round

log = logging.getLogger("raftset.sidecar")


@dataclass(frozen=True)
class Loop:
    """One row of the loop table: a supervised loop and how often its rounds run."""

    name: str  # shown on /livez and in the loop metrics
    interval: float
    round: Round
    leader_only: bool = False  # runs only while our started member leads
    not_leading: Callable[[], None] | None = None  # a leader-only loop's reset while it does not lead


class Sidecar:
    def __init__(self, settings: SidecarConfig, kube: SidecarKube) -> None:
        self.settings = settings
        self.state = state = State.initial(settings.pod_name, datetime.now(timezone.utc))
        self.metrics = metrics = Metrics()
        self.stopping = asyncio.Event()
        self.loops = Loops(settings.loop_stall, on_error=self._loop_error)
        self.peers = peers = Peers(settings, kube, count=metrics.count,
                                   report=functools.partial(report, state))
        volume = DataVolume(settings, state)
        self.volume = volume
        self.quorum_loss = QuorumLossShell(settings, state, peers, kube, volume, self.stopping)
        self.restore = RestoreShell(settings, state, kube)
        self.join = JoinShell(settings, state, peers, kube, metrics, volume, self.stopping,
                              quorum_loss=self.quorum_loss.before_join, restore=self.restore.prepare)
        self.heartbeat = HeartbeatShell(settings, state, peers, kube, metrics, volume)
        self.promotion = PromotionShell(settings, state, peers, metrics, publish_now=self.heartbeat.round)
        self.clean = CleanShell(settings, state, peers, metrics, hold=self.loops.test_hold)
        self.membership = MembershipShell(settings, state, peers, kube, metrics)
        self.leaver = LeaveShell(settings, state, peers, kube, metrics)
        self.backup = BackupShell(settings, state, peers, kube, metrics,
                                  reporter=functools.partial(self.loops.reporter, backup.LOOP))
        self.maintenance = MaintenanceShell(settings, state, peers, kube, metrics)
        self.replace = ReplaceShell(settings, state, peers, kube, rejoin=self.rejoin)
        self.scratch = ScratchShell(settings, metrics) if settings.engine.scratch and settings.scratch_dir else None
        metrics.watch(lambda: member_gauges(state, self.loops.counters()))

    def table(self) -> list[Loop]:
        """Every supervised loop, started once the join has written the startup file."""
        settings = self.settings
        poll = settings.poll_interval
        return [
            Loop("heartbeat", poll, self.heartbeat.round),
            Loop("promote", poll, self.promotion.round),
            Loop("clean", settings.clean_interval, self.clean.round, leader_only=True,
                 not_leading=self.clean.not_leading),
            Loop("membership", poll, self.membership.round, leader_only=True,
                 not_leading=self.membership.not_leading),
            Loop(backup.LOOP, settings.backup_interval, self.backup.round, leader_only=True),
            Loop("maintenance", settings.maintenance_interval, self.maintenance.round),
            Loop("repair", poll, self.replace.round),
            *([Loop("scratch", scratch.SWEEP_INTERVAL_S, self.scratch.round)] if self.scratch else []),
        ]

    def guarded(self, loop: Loop) -> Round:
        """The loop's round, or, for a leader-only loop while we do not lead, its reset."""
        if not loop.leader_only:
            return loop.round

        async def one_round() -> float | None:
            if self.state.leading:
                return await loop.round()
            if loop.not_leading is not None:
                loop.not_leading()
            return None
        return one_round

    async def run(self) -> None:
        await self.join.run()
        if self.stopping.is_set():
            return
        tasks = [asyncio.create_task(self.loops.run(loop.name, loop.interval, self.guarded(loop), self.stopping),
                                     name=loop.name) for loop in self.table()]
        if self.quorum_loss.forced is not None:
            tasks.append(asyncio.create_task(self.quorum_loss.settle(), name="recovery-settle"))
        await self.stopping.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _loop_error(self, loop: str, kind: str, exc: BaseException) -> None:
        """Supervision's report of a failed round, shown on /readyz (supervision counted it, and logged an
        unexpected one)."""
        if kind == "expected":
            report(self.state, loop, exc)
        else:  # supervision retries the round after its backoff
            self.state.last_error = f"{loop}: unexpected {type(exc).__name__}: {exc}"

    async def rejoin(self, reason: str) -> None:
        """The join's premise failed (our member left Raft): decide the join again, from scratch.

        The startup file goes first, so the store's next start cannot run the removed member
        again; the join then moves the old data aside (on a linearizable answer only) and adds
        a new learner, exactly as for a new pod.
        """
        log.warning("deciding the join again: %s", reason)
        self.state.phase = "joining"
        self.state.member_id = None
        self.volume.remove_startup()
        await self.join.run()  # the supervised promote loop then promotes the new learner

    async def leave(self, trigger: str) -> dict[str, Any]:
        return await self.leaver.leave(trigger)

    def stop(self) -> None:
        self.stopping.set()

    async def close(self) -> None:
        await self.peers.close()


async def leave_then_stop(sidecar: Sidecar, trigger: str) -> None:
    """SIGTERM: leave if /leave did not run yet, then stop."""
    with contextlib.suppress(Exception):
        await sidecar.leave(trigger)
    sidecar.stop()


