"""The heartbeat shell: poll the local member, publish the Lease and the pod's role label.

Writes on change plus a slow refresh (heartbeat.should_write decides), and backs off a
refused write instead of retrying it on every poll.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from typing import Any

from raftset import contract
from raftset.sidecar.io.etcdclient import EtcdClientError, Status
from raftset.sidecar.io.kube import SidecarKube
from raftset.sidecar.io.peers import Peers
from raftset.sidecar.io.startup import DataVolume
from raftset.sidecar.metrics import Metrics
from raftset.sidecar.pure import heartbeat, readiness
from raftset.sidecar.pure.backoff import Backoff
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.heartbeat import Heartbeat
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells.plumbing import API_ERRORS, report

log = logging.getLogger("raftset.sidecar")


class HeartbeatShell:
    def __init__(self, settings: SidecarConfig, state: State, peers: Peers, kube: SidecarKube, metrics: Metrics,
                 volume: DataVolume) -> None:
        self.settings, self.state, self.peers, self.kube, self.metrics = settings, state, peers, kube, metrics
        self.volume = volume
        self.lock = asyncio.Lock()
        self.written: Heartbeat | None = None
        self.label_written: str | None = None
        self.retry_at = 0.0
        self.backoff = Backoff(1.0, max(1.0, settings.heartbeat_interval))

    async def round(self) -> None:
        """Poll the member and publish; serialised, so an older poll never overwrites a newer one."""
        settings = self.settings
        async with self.lock:
            try:
                status = await self.peers.local.status(timeout=min(settings.poll_interval, 3.0))
            except EtcdClientError as exc:
                status = None
                if self.state.phase == "started":
                    log.debug("local member not answering: %s", exc)
            self.state.status = status
            if status is not None:
                if self.state.member_id != status.member_id:
                    # Bootstrapped or rejoined without MemberList: the id is known only now.
                    self.volume.remember_member(status.member_id)
                if self.state.last_error and self.state.ready:
                    self.state.last_error = ""
            self._beat(status)  # with the last read's verdict
            await self.publish()
            await self._read_through(status)  # after the heartbeat: a read that hangs must not delay it
            self._beat(status)
            await self.publish()  # a new verdict at once (it is in the change key); else nothing is written

    def _beat(self, status: Status | None) -> None:
        self.state.heartbeat = heartbeat.beat(self.settings.pod_name, status, datetime.now(timezone.utc), self.state.member_id,
                                         serving=self.state.readiness)

    async def _read_through(self, status: Status | None) -> None:
        """Readiness's reads (readiness.py): a linearizable one, then the member's own revision; logs
        when the member stops or starts serving."""
        state = self.state
        before = state.readiness
        if not readiness.worth_a_read(state.phase, status):
            state.read_error, state.readings, state.lag = readiness.NOT_READ_YET, (), None
            return
        try:
            cluster = await self.peers.local.revision(timeout=readiness.READ_TIMEOUT_S)
            own = await self.peers.local.revision(serializable=True, timeout=readiness.READ_TIMEOUT_S)
            state.read_error = None
        except EtcdClientError as exc:
            state.read_error = str(exc)
        else:
            now = time.monotonic()
            state.readings = readiness.remember(state.readings, readiness.Reading(now, cluster))
            state.lag = readiness.behind(state.readings, own, now)
        said = readiness.announcement(before, state.readiness)
        if said is not None:
            log.log(logging.WARNING if said[0] else logging.INFO, "%s", said[1])

    async def publish(self) -> None:
        """The Lease and the pod's role label, on change plus a slow refresh."""
        settings = self.settings
        if self.state.phase == "left":
            return
        beat = self.state.heartbeat
        now = time.monotonic()
        due = heartbeat.should_write(self.written, beat, self.state.heartbeat_written_at, now, settings.heartbeat_interval)
        if due and now >= self.retry_at:
            await self._write_lease(beat, now)
        if self.label_written != beat.role:
            try:
                await self.kube.label_pod(settings.pod_name, {contract.LABEL_ROLE: beat.role})
                self.label_written = beat.role
            except API_ERRORS as exc:
                report(self.state, "role label", exc)

    async def _write_lease(self, beat: Heartbeat, now: float) -> None:
        settings = self.settings
        body: dict[str, Any] = heartbeat.lease_body(
            settings.pod_name, settings.namespace, settings.cluster, beat,
            duration=settings.lease_duration, owner=self.state.workload_owner,
            extra_labels={contract.LABEL_ENGINE: settings.engine.name},
        )
        try:
            await self.kube.apply_lease(body)
            self.metrics.lease_write(True)
            self.written, self.state.heartbeat_written_at = beat, now
            self.backoff.reset()
        except API_ERRORS as exc:
            # A refused write is not retried on every poll: back off up to the refresh.
            self.metrics.lease_write(False)
            self.retry_at = now + self.backoff.next()
            report(self.state, "heartbeat lease", exc)
