"""The replace shell: replace our member on request, and join again when the join's premise fails.

Every poll while the store runs as a member: if our store has stopped and an authoritative
MemberList no longer lists our member, the join is decided again (fault c: etcd exits with
"member removed" and would otherwise crash-loop on its old startup file). Every heartbeat
interval (every poll while one is under way) it reads its own pod for a replace request and
takes one step of it (raftset.sidecar.pure.replace), recording each on the pod for the operator; the
leader's CORRUPT verdict on the pod (raftset.sidecar.pure.corruption) counts as a diagnosis.
Once our member votes, data moved aside by an earlier join is released.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from raftset import contract
from raftset.replace import Progress
from raftset.sidecar.io import datadir
from raftset.sidecar.io.etcdclient import EtcdClientError, MemberClient, Refusal
from raftset.sidecar.io.etcdlock import LOCK_PREFIX, HeldLock
from raftset.sidecar.io.kube import SidecarKube
from raftset.sidecar.io.peers import Peers
from raftset.sidecar.pure import corruption, leave, replace
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells.plumbing import LOCK_NAME, report

log = logging.getLogger("raftset.sidecar")


class ReplaceShell:
    """Port: `rejoin`, the join decided again from scratch (our member left Raft)."""

    def __init__(self, settings: SidecarConfig, state: State, peers: Peers, kube: SidecarKube, *,
                 rejoin: Callable[[str], Awaitable[None]]) -> None:
        self.settings, self.state, self.peers, self.kube = settings, state, peers, kube
        self.rejoin = rejoin
        self.recorded: Progress | None = None  # what we last wrote on the pod
        self.pod_read_at = 0.0
        self.under_way = False

    async def round(self) -> None:
        if self.state.phase != "started":
            return
        if self.state.status is None:
            await self.check_premise()
            if self.state.phase != "started":
                return
        elif not self.state.status.is_learner and datadir.aside(self.settings.data_dir):
            for path in datadir.release(self.settings.data_dir):
                log.info("member %x votes: released the data moved aside to %s", self.state.status.member_id, path)
        now = time.monotonic()
        if self.under_way or now - self.pod_read_at >= self.settings.heartbeat_interval:
            self.pod_read_at = now
            await self.replace_round()

    async def check_premise(self) -> None:
        """Our store does not answer: is our member still in Raft? If not, decide the join again."""
        own_id = self.state.member_id
        if own_id is None:
            return
        urls = self.peers.candidates(await self.peers.kept(), [])
        if not urls:
            return
        try:
            _, members, linearizable = await self.peers.authoritative_members(urls)
        except EtcdClientError:
            return  # nobody answers: a whole-cluster restart looks like this; keep the premise
        if await self.peers.local_member() is not None:
            return
        reason = replace.premise_failed(own_id, False, members, linearizable)
        if reason is not None:
            await self.rejoin(reason)

    async def replace_round(self) -> None:
        settings = self.settings
        pod = await self.kube.pod(settings.pod_name)
        wanted, progress = replace.requested(pod), replace.progress(pod)
        store = replace.store_container(pod, settings.engine.name)
        diagnosis = replace.diagnose(store, self.state.status is not None, settings.engine.capabilities.corruption_texts,
                                    settings.crash_loop_restarts, replace.restart_baseline(pod))
        suspected = corruption.suspicion(replace.corruption_verdict(pod), self.state.member_id, self.state.alarms)
        self.state.corruption = suspected
        doubtful = False
        if diagnosis is None and suspected is not None:  # the leader judged a CORRUPT alarm on our member
            diagnosis, doubtful = suspected.reason, not suspected.replace
        self.under_way = wanted or progress is not None or diagnosis is not None
        if not self.under_way:
            self.recorded = None
            return
        kept = await self.peers.kept()
        client, members, linearizable = await self.peers.authoritative_members(
            [settings.client_url, *self.peers.candidates(kept, [])])
        why = replace.cause(wanted, diagnosis)
        if not linearizable:
            await self.record(progress, contract.ReplacePhase.WAITING, "no leader answers: waiting for an "
                                                                       "authoritative membership", self.state.member_id, why)
            return
        statuses = await self.peers.statuses(members)
        own_id = self.state.member_id
        own_status = statuses.get(own_id) if own_id is not None else None
        leading = own_status is not None and own_status.is_leader
        target = (leave.transfer_target(own_id, members, statuses, self.peers.ordinals(members), kept)
                  if leading and own_id is not None else None)
        lock_held = (own_id is not None and corruption.alarm_serializes(self.state.cluster_alarms, own_id)
                     and await self.lock_held(client))
        view = replace.ReplaceView(requested=wanted, progress=progress, own_id=own_id, members=members,
                                  statuses=statuses, size=len(kept), leading=leading,
                                  hand_off=settings.engine.capabilities.hand_off, target=target,
                                  diagnosis=diagnosis, automatic=settings.repair_automatic, doubtful=doubtful,
                                  alarms=self.state.cluster_alarms, lock_held=lock_held)
        decision = replace.decide(view)
        log.info("replace: %s (%s)", decision.phase or decision.act.value, decision.reason)
        if decision.act is replace.Act.FINISH:
            # A crash loop is counted afresh from here: the restarts so far belong to the old member. The
            # finished record stays until the next replacement: the operator may not have seen any step yet.
            finished = replace.advanced(progress, self.recorded, decision.phase, decision.reason, own_id)
            await self.kube.annotate_pod(settings.pod_name, {
                contract.ANNOTATION_REPLACE: None, contract.ANNOTATION_REPLACE_PROGRESS: finished.to_json(),
                contract.ANNOTATION_CORRUPTION: None,
                contract.ANNOTATION_RESTART_BASELINE: str(int(store.get("restartCount") or 0))})
            log.warning("replace: %s", decision.reason)
            self.recorded, self.under_way = None, False
            return
        if decision.act is replace.Act.NONE:
            return
        await self.record(progress, decision.phase, decision.reason, own_id, why)
        if decision.act is replace.Act.HAND_OFF:
            assert decision.target is not None
            await self.peers.move_leader(decision.target, "replace")
        elif decision.act is replace.Act.REMOVE:
            assert own_id is not None
            await self.remove_self(own_id, kept, view)

    async def remove_self(self, own_id: int, kept: list[int], first: replace.ReplaceView) -> None:
        """MemberRemove of our own member through another voter, decided again under the lock and sent only
        past its fence (a lost lock removes nothing: the next round decides again); never retried.

        Under a CORRUPT alarm that names only our member the lock cannot be taken (every write is
        refused) and the alarm serializes instead (corruption.alarm_serializes)."""
        settings = self.settings
        others = [u for u in self.peers.candidates(kept, []) if u != settings.client_url]
        client, _, linearizable = await self.peers.authoritative_members(others)
        if not linearizable:
            return
        entered = False
        try:
            async with client.lock(LOCK_NAME, timeout=10) as held:
                entered = True
                decided, error = await self.remove_decided_again(client, own_id, first, held)
        except EtcdClientError as exc:
            if entered or exc.refusal is not Refusal.CORRUPT:
                raise
            waiting = corruption.lock_blocked(await client.alarms(), own_id, await self.lock_held(client))
            if waiting is not None:  # the alarms changed since this round read them: the next round records it
                log.info("replace: %s", waiting)
                return
            log.warning("replace: a CORRUPT alarm names member %x alone and refuses the membership lock: "
                        "removing it without the lock", own_id)
            decided, error = await self.remove_decided_again(client, own_id, first)
        if not decided:
            return  # something changed (we lead again, another change began): the next round decides
        if error is not None and error.refusal is not Refusal.MEMBER_NOT_FOUND:
            report(self.state, "replace: remove", error)
            return
        log.warning("replace: member %x removed from Raft; joining again as a new member", own_id)
        await self.record(first.progress, contract.ReplacePhase.REJOINING,
                          f"member {own_id:x} left Raft; joining again as a new member on fresh data", own_id)
        await self.rejoin(f"member {own_id:x} was removed to be replaced")

    async def remove_decided_again(self, client: MemberClient, own_id: int, first: replace.ReplaceView,
                                   held: HeldLock | None = None) -> tuple[bool, EtcdClientError | None]:
        """Decide once more on a fresh MemberList; (whether REMOVE still holds, MemberRemove's refusal).

        Under the lock (`held`) the removal waits for its fence: LockLost unless the lock outlives it."""
        members = await client.member_list()
        statuses = await self.peers.statuses(members)
        own_leads = (st := statuses.get(own_id)) is not None and st.is_leader
        again = replace.decide(dataclasses.replace(first, members=members, statuses=statuses, leading=own_leads,
                                                  target=None))
        if again.act is not replace.Act.REMOVE:
            return False, None
        if held is not None:
            await held.fence(client.timeout)
        return True, await self.peers.member_remove(client, own_id)

    @staticmethod
    async def lock_held(client: MemberClient) -> bool:
        """Whether a membership lock key exists (a read: it works under a CORRUPT alarm)."""
        _, holders = await client.get_prefix(f"{LOCK_PREFIX}/{LOCK_NAME}/")
        return bool(holders)

    async def record(self, read: Progress | None, phase: str, reason: str, own_id: int | None,
                     cause: str = "") -> None:
        """Write the progress record on our pod when it changed (replace.next_progress says what it is)."""
        current = replace.next_progress(read, self.recorded, phase, reason, own_id, cause, uuid.uuid4().hex[:8])
        if current is None:
            return
        body: dict[str, Any] = {contract.ANNOTATION_REPLACE_PROGRESS: current.to_json()}
        await self.kube.annotate_pod(self.settings.pod_name, body)
        self.recorded = current
