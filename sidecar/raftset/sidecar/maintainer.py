"""The space-and-alarms shell: the leader's sidecar reads alarms and sizes, carries out one action, narrates it.

maintenance.decide chooses; this shell gathers what it needs (alarms, the linearizable
MemberList, every member's Status), runs the one action through raftset.etcdclient, and posts
an Event about the cluster for every action (and once for every report). The run it is in
lives here, in memory: a sidecar that stops leading forgets it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from raftset.etcdclient import EtcdClientError, Member, Refusal
from raftset.sidecar import heartbeat, maintenance
from raftset.sidecar.metrics import STEP_MAINTENANCE
from raftset.sidecar.plumbing import API_ERRORS, Shell

if TYPE_CHECKING:
    from raftset.sidecar.agent import Agent

log = logging.getLogger("raftset.sidecar")


class Maintainer(Shell):
    def __init__(self, agent: Agent) -> None:
        super().__init__(agent)
        self.run = maintenance.Run()
        self.next_scheduled: datetime | None = None  # computed afresh when this sidecar starts leading

    async def once(self) -> None:
        agent, settings = self.agent, self.settings
        local, status = agent.local, agent.status
        if agent.phase != "started" or status is None or status.is_learner:  # a learner refuses Alarm
            agent.alarms, self.run, self.next_scheduled = (), maintenance.Run(), None
            return
        alarms = await local.alarms()
        agent.alarms = tuple(sorted(a.kind.name for a in alarms if a.member_id == agent.member_id))
        if not status.is_leader:
            self.run, self.next_scheduled = maintenance.Run(), None
            return
        now = datetime.now(timezone.utc)
        policy = settings.defrag
        if self.next_scheduled is None:
            self.next_scheduled = maintenance.next_scheduled(policy.schedule, now)
        due = self.next_scheduled is not None and now >= self.next_scheduled
        if maintenance.idle(alarms, due, self.run, policy):
            return
        members = await local.member_list()
        statuses = await agent.statuses(members)
        action = maintenance.decide(leader_id=status.member_id, members=members, statuses=statuses,
                                    alarms=alarms, run=self.run, policy=policy, schedule_due=due,
                                    quota=settings.engine.quota(settings.options))
        if maintenance.started_scheduled_run(due, self.run, action.run):
            self.next_scheduled = maintenance.next_scheduled(policy.schedule, now)
        if action.kind is maintenance.Kind.NONE:
            self.run = action.run
            log.debug("maintenance: %s", action.message)
            return
        await self._narrate(action)
        try:
            await self._carry_out(action, members)
        except EtcdClientError:
            agent.metrics.outcome(STEP_MAINTENANCE, "error")
            raise
        agent.metrics.outcome(STEP_MAINTENANCE, action.kind.value)
        self.run = action.run

    async def _carry_out(self, action: maintenance.Action, members: Sequence[Member]) -> None:
        local, kind = self.agent.local, action.kind
        if kind is maintenance.Kind.COMPACT:
            revision = await local.revision()
            try:
                await local.compact(revision, timeout=60.0)
            except EtcdClientError as exc:
                if exc.refusal is not Refusal.COMPACTED:
                    raise
                log.info("maintenance: revision %d was compacted already", revision)
                return
            log.warning("maintenance: compacted to revision %d", revision)
        elif kind is maintenance.Kind.DEFRAGMENT:
            target = next(m for m in members if m.id == action.member_id)
            client = local if target.id == self.agent.member_id else self.agent.etcd().member(target.client_urls[0])
            await client.defragment()
            log.warning("maintenance: defragmented %s", target.name or target.hex_id)
        elif kind is maintenance.Kind.DISARM:
            for alarm in action.alarms:
                await local.disarm(alarm)
            log.warning("maintenance: disarmed %s", ", ".join(f"{a.kind.name}@{a.member_id:x}" for a in action.alarms))

    async def _narrate(self, action: maintenance.Action) -> None:
        """The Event that says what is being done, before it is done; a failed post never stops the action."""
        if not action.reason:
            return
        agent = self.agent
        level = logging.WARNING if action.warning else logging.INFO
        log.log(level, "maintenance: %s", action.message)
        try:
            workload = await agent.workload()
            subject = heartbeat.event_subject(workload, self.settings.namespace)
            if subject is not None:
                await agent.kube.post_event(subject, warning=action.warning, reason=action.reason,
                                            message=action.message, component=self.settings.pod_name)
        except API_ERRORS as exc:
            agent.error("maintenance event", exc)
