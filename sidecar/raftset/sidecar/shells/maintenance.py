"""The space-and-alarms shell: the leader's sidecar reads alarms and sizes, carries out one action, narrates it.

maintenance.decide chooses; this shell gathers what it needs (alarms, the linearizable
MemberList, every member's Status), runs the one action through raftset.sidecar.io.etcdclient, and posts
an Event about the cluster for every action (and once for every report). The run it is in
lives here, in memory: a sidecar that stops leading forgets it.

A CORRUPT alarm is judged first (raftset.sidecar.pure.corruption, over every voter's HashKV at one
revision): the verdict goes on the accused member's pod, whose own sidecar replaces it or
reports it (raftset.sidecar.shells.replace); the alarm of a member that has left Raft is disarmed.

Without a CORRUPT alarm, every RAFTSET_HASH_CHECK_INTERVAL the leader compares the same hashes
(corruption.check) and hands a member whose data differs over the same way; it never raises an
alarm itself (that would refuse every write in the cluster).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timezone
from typing import TypeVar

from raftset import contract
from raftset.sidecar.io.etcdclient import Alarm, AlarmKind, EtcdClientError, KVHash, Member, MemberClient, Refusal
from raftset.sidecar.io.kube import SidecarKube
from raftset.sidecar.io.peers import Peers
from raftset.sidecar.metrics import STEP_HASH_CHECK, STEP_MAINTENANCE, Metrics
from raftset.sidecar.pure import corruption, heartbeat, maintenance, replace
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells.plumbing import API_ERRORS, report

log = logging.getLogger("raftset.sidecar")
T = TypeVar("T")

HASH_TIMEOUT_S = 60.0  # HashKV reads the member's whole key space
FUTURE_TRIES, FUTURE_PAUSE_S = 10, 0.2  # a follower that has not yet applied the leader's revision


class MaintenanceShell:
    def __init__(self, settings: SidecarConfig, state: State, peers: Peers, kube: SidecarKube, metrics: Metrics) -> None:
        self.settings, self.state, self.peers, self.kube, self.metrics = settings, state, peers, kube, metrics
        self.run = maintenance.Run()
        self.next_scheduled: datetime | None = None  # computed afresh when this sidecar starts leading
        self.hashed: dict[int, KVHash] = {}  # HashKV answers at `hashed_at`, while a CORRUPT alarm is judged
        self.hashed_at = 0
        self.checked_at: float | None = None  # monotonic time of this leader's last hash check

    async def round(self) -> None:
        settings = self.settings
        local, status = self.peers.local, self.state.status
        if self.state.phase != "started" or status is None or status.is_learner:  # a learner refuses Alarm
            self.state.alarms, self.state.cluster_alarms, self.run, self.next_scheduled = (), (), maintenance.Run(), None
            self.checked_at = None
            return
        alarms = await local.alarms()
        self.state.alarms = tuple(sorted(a.kind.name for a in alarms if a.member_id == self.state.member_id))
        self.state.cluster_alarms = tuple(alarms)
        if not status.is_leader:
            self.run, self.next_scheduled, self.checked_at = maintenance.Run(), None, None
            return
        since = None if self.checked_at is None else time.monotonic() - self.checked_at
        if corruption.check_due(settings.hash_check_interval, alarms, since):
            await self.check_hashes()
        now = datetime.now(timezone.utc)
        policy = settings.defrag
        if self.next_scheduled is None:
            self.next_scheduled = maintenance.next_scheduled(policy.schedule, now)
        due = self.next_scheduled is not None and now >= self.next_scheduled
        if maintenance.idle(alarms, due, self.run, policy):
            return
        members = await local.member_list()
        if any(a.kind is AlarmKind.CORRUPT for a in alarms):
            await self.judge_corruption(alarms, members)
        statuses = await self.peers.statuses(members)
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
            self.metrics.outcome(STEP_MAINTENANCE, "error")
            raise
        self.metrics.outcome(STEP_MAINTENANCE, action.kind.value)
        self.run = action.run

    async def judge_corruption(self, alarms: Sequence[Alarm], members: Sequence[Member]) -> None:
        """CORRUPT: disarm the alarms of members that left Raft; write the verdict on each accused member's
        pod, where its own sidecar takes it as a diagnosis (raftset.sidecar.pure.replace); narrate each once."""
        hashes: dict[int, KVHash | None] = {}
        revision = 0
        if corruption.accused(alarms, members):
            revision = await self.peers.local.revision()  # reads still work under the alarm; writes do not move it
            hashes = await self.hashes(members, revision)
        judgement = corruption.judge(alarms, members, hashes, revision)
        for alarm in judgement.disarm:
            await self._narrate(maintenance.MaintenanceAction(
                maintenance.Kind.DISARM, f"member {alarm.member_id:x} has left Raft: disarming the CORRUPT alarm "
                                         f"that named it", reason="AlarmDisarmed"))
            await self.peers.local.disarm(alarm)
            log.warning("maintenance: disarmed CORRUPT@%x", alarm.member_id)
        by_id = {m.id: m for m in members}
        for verdict in judgement.verdicts:
            await self.hand_over(verdict, by_id[verdict.member_id])

    async def check_hashes(self) -> None:
        """No CORRUPT alarm: compare every voter's hash at one revision (corruption.check), hand a member
        whose data differs over like an alarm's verdict, and clear the verdicts a later check no longer makes."""
        self.checked_at = time.monotonic()  # a failed check waits for the next interval too
        try:
            members = await self.peers.local.member_list()
        except EtcdClientError:
            self.metrics.outcome(STEP_HASH_CHECK, "error")
            raise
        revision = corruption.common_revision(await self.own_revisions(members))
        if revision is None:
            self.metrics.outcome(STEP_HASH_CHECK, corruption.CHECK_NOT_COMPARED)
            log.info("hash check: a voter's own revision could not be read: nothing compared this time")
            return
        result = corruption.check(members, await self.hashes(members, revision), revision)
        self.metrics.outcome(STEP_HASH_CHECK, corruption.check_outcome(result))
        log.log(logging.WARNING if result.verdicts else logging.INFO, "hash check: %s", result.reason)
        by_id = {m.id: m for m in members}
        for verdict in result.verdicts:
            await self.hand_over(verdict, by_id[verdict.member_id])
        if not result.compared:
            return
        for member in members:
            ordinal = self.settings.naming.ordinal_of_member(member.name, member.peer_urls)
            if ordinal is None:
                continue
            pod_name = self.settings.naming.pod(ordinal)
            try:
                if corruption.outdated(replace.corruption_verdict(await self.kube.pod(pod_name)), member.id, result):
                    await self.kube.annotate_pod(pod_name, {contract.ANNOTATION_CORRUPTION: None})
                    log.warning("hash check: member %s agrees again: its verdict is cleared",
                                member.name or member.hex_id)
            except API_ERRORS as exc:
                report(self.state, "hash check: clearing a verdict", exc)

    async def hashes(self, members: Sequence[Member], revision: int) -> dict[int, KVHash | None]:
        """Every voter's HashKV at `revision` (None: no answer as itself); kept while the revision stands,
        as it does while the alarm refuses writes: HashKV reads a member's whole key space."""
        if self.hashed_at != revision:
            self.hashed, self.hashed_at = {}, revision

        async def one(member: Member) -> KVHash | None:
            if member.id in self.hashed or not member.client_urls:
                return self.hashed.get(member.id)
            client = self.client(member)
            for attempt in range(FUTURE_TRIES):
                try:
                    found = await client.hash_kv(revision, timeout=HASH_TIMEOUT_S)
                    break
                except EtcdClientError as exc:
                    if exc.refusal is Refusal.FUTURE_REVISION and attempt + 1 < FUTURE_TRIES:
                        await asyncio.sleep(FUTURE_PAUSE_S)  # writes flow: a follower applies it in a moment
                        continue
                    log.info("maintenance: no hash from %s at revision %d: %s", member.name or member.hex_id,
                             revision, exc)
                    return None
            if found.member_id != member.id:
                return None
            self.hashed[member.id] = found
            return found

        return await each_voter(members, one)

    async def own_revisions(self, members: Sequence[Member]) -> dict[int, int | None]:
        """Every voter's own applied revision (a serializable read on it; None: no answer)."""
        async def one(member: Member) -> int | None:
            if not member.client_urls:
                return None
            try:
                return await self.client(member).revision(serializable=True)
            except EtcdClientError as exc:
                log.info("maintenance: no revision from %s: %s", member.name or member.hex_id, exc)
                return None

        return await each_voter(members, one)

    def client(self, member: Member) -> MemberClient:
        return self.peers.local if member.id == self.state.member_id else self.peers.etcd().member(member.client_urls[0])

    async def hand_over(self, verdict: corruption.Verdict, member: Member) -> None:
        """Write the verdict on the member's pod (when it changed) and narrate it once."""
        settings = self.settings
        ordinal = settings.naming.ordinal_of_member(member.name, member.peer_urls)
        pod_name = settings.naming.pod(ordinal) if ordinal is not None else ""
        if pod_name:
            found = corruption.record(verdict)
            try:  # a failed write is tried again next round; the Event below still tells
                if replace.corruption_verdict(await self.kube.pod(pod_name)) != found:
                    await self.kube.annotate_pod(pod_name, {contract.ANNOTATION_CORRUPTION: found.to_json()})
            except API_ERRORS as exc:
                report(self.state, "maintenance: corruption verdict", exc)
        key = corruption.report_key(verdict)
        if key in self.run.reported:
            return
        where = f"pod {pod_name}" if pod_name else "no pod (its member names none)"
        if verdict.replace:
            then = ("it is replaced by a new member on fresh data (spec.repair.policy Automatic)"
                    if settings.repair_automatic else
                    f"spec.repair.policy is Manual: annotate the pod {contract.ANNOTATION_REPLACE}=true to replace it")
            action = maintenance.MaintenanceAction(maintenance.Kind.REPORT, f"{verdict.reason}; {where}: {then}",
                                        reason="MemberCorrupt", warning=True, member_id=verdict.member_id)
        else:
            action = maintenance.MaintenanceAction(maintenance.Kind.REPORT, f"{verdict.reason}; {where}: nothing is replaced, "
                                        f"a person decides", reason="CorruptUnconfirmed", warning=True,
                                        member_id=verdict.member_id)
        await self._narrate(action)
        self.run = dataclasses.replace(self.run, reported=self.run.reported | {key})

    async def _carry_out(self, action: maintenance.MaintenanceAction, members: Sequence[Member]) -> None:
        local, kind = self.peers.local, action.kind
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
            client = local if target.id == self.state.member_id else self.peers.etcd().member(target.client_urls[0])
            await client.defragment()
            log.warning("maintenance: defragmented %s", target.name or target.hex_id)
        elif kind is maintenance.Kind.DISARM:
            for alarm in action.alarms:
                await local.disarm(alarm)
            log.warning("maintenance: disarmed %s", ", ".join(f"{a.kind.name}@{a.member_id:x}" for a in action.alarms))

    async def _narrate(self, action: maintenance.MaintenanceAction) -> None:
        """The Event that says what is being done, before it is done; a failed post never stops the action."""
        if not action.reason:
            return
        level = logging.WARNING if action.warning else logging.INFO
        log.log(level, "maintenance: %s", action.message)
        try:
            workload = await self.peers.workload()
            subject = heartbeat.event_subject(workload, self.settings.namespace)
            if subject is not None:
                await self.kube.post_event(subject, warning=action.warning, reason=action.reason,
                                            message=action.message, component=self.settings.pod_name)
        except API_ERRORS as exc:
            report(self.state, "maintenance event", exc)


async def each_voter(members: Sequence[Member], ask: Callable[[Member], Awaitable[T]]) -> dict[int, T]:
    """`ask` every voter at once; the answers by member ID."""
    voters = [m for m in members if not m.is_learner]
    return dict(zip([m.id for m in voters], await asyncio.gather(*(ask(m) for m in voters)), strict=True))
