"""The heartbeat shell: poll the local member, publish the Lease and the pod's role label.

Writes on change plus a slow refresh (heartbeat.should_write decides), and backs off a
refused write instead of retrying it on every poll.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from raftset import contract
from raftset.sidecar.io.etcdclient import EtcdClientError, Status
from raftset.sidecar.pure import readiness
from raftset.sidecar.pure import heartbeat
from raftset.sidecar.pure.heartbeat import Heartbeat
from raftset.sidecar.pure.backoff import Backoff
from raftset.sidecar.shells.plumbing import API_ERRORS, Shell

if TYPE_CHECKING:
    from raftset.sidecar.agent import Agent

log = logging.getLogger("raftset.sidecar")


class HeartbeatPublisher(Shell):
    def __init__(self, agent: Agent) -> None:
        super().__init__(agent)
        self.lock = asyncio.Lock()
        self.written: Heartbeat | None = None
        self.written_at: float | None = None
        self.label_written: str | None = None
        self.retry_at = 0.0
        self.backoff = Backoff(1.0, max(1.0, agent.settings.heartbeat_interval))

    async def beat_once(self) -> None:
        """Poll the member and publish; serialised, so an older poll never overwrites a newer one."""
        agent, settings = self.agent, self.settings
        async with self.lock:
            try:
                status = await agent.local.status(timeout=min(settings.poll_interval, 3.0))
            except EtcdClientError as exc:
                status = None
                if agent.phase == "started":
                    log.debug("local member not answering: %s", exc)
            agent.status = status
            if status is not None:
                if agent.member_id != status.member_id:
                    # Bootstrapped or rejoined without MemberList: the id is known only now.
                    agent.remember_member(status.member_id)
                if agent.last_error and agent.ready:
                    agent.last_error = ""
            self._beat(status)  # with the last read's verdict
            await self.publish()
            await self._read_through(status)  # after the heartbeat: a read that hangs must not delay it
            self._beat(status)
            await self.publish()  # a new verdict at once (it is in the change key); else nothing is written

    def _beat(self, status: Status | None) -> None:
        agent = self.agent
        agent.heartbeat = heartbeat.beat(self.settings.pod_name, status, datetime.now(timezone.utc), agent.member_id,
                                         serving=agent.readiness)

    async def _read_through(self, status: Status | None) -> None:
        """Readiness's linearizable read (readiness.py); logs when the member stops or starts serving."""
        agent = self.agent
        was = agent.read_error
        if not readiness.worth_a_read(agent.phase, status):
            agent.read_error = readiness.NOT_READ_YET
            return
        try:
            await agent.local.get(readiness.READ_KEY, timeout=readiness.READ_TIMEOUT_S)
            agent.read_error = None
        except EtcdClientError as exc:
            agent.read_error = str(exc)
        if agent.read_error is not None and agent.read_error != was:
            log.warning("not ready: a linearizable read through this member failed: %s", agent.read_error)
        elif agent.read_error is None and was not in (None, readiness.NOT_READ_YET):
            log.info("ready again: a linearizable read through this member succeeded")

    async def publish(self) -> None:
        """The Lease and the pod's role label, on change plus a slow refresh."""
        agent, settings = self.agent, self.settings
        if agent.phase == "left":
            return
        beat = agent.heartbeat
        now = time.monotonic()
        due = heartbeat.should_write(self.written, beat, self.written_at, now, settings.heartbeat_interval)
        if due and now >= self.retry_at:
            await self._write_lease(beat, now)
        if self.label_written != beat.role:
            try:
                await agent.kube.label_pod(settings.pod_name, {contract.LABEL_ROLE: beat.role})
                self.label_written = beat.role
            except API_ERRORS as exc:
                agent.error("role label", exc)

    async def _write_lease(self, beat: Heartbeat, now: float) -> None:
        agent, settings = self.agent, self.settings
        body: dict[str, Any] = heartbeat.lease_body(
            settings.pod_name, settings.namespace, settings.cluster, beat,
            duration=settings.lease_duration, owner=agent.workload_owner,
            extra_labels={contract.LABEL_ENGINE: settings.engine.name},
        )
        try:
            await agent.kube.apply_lease(body)
            agent.metrics.lease_write(True)
            self.written, self.written_at = beat, now
            self.backoff.reset()
        except API_ERRORS as exc:
            # A refused write is not retried on every poll: back off up to the refresh.
            agent.metrics.lease_write(False)
            self.retry_at = now + self.backoff.next()
            agent.error("heartbeat lease", exc)
