"""The leave shell: on preStop or SIGTERM, hand leadership away and leave only if scaled away.

Runs once per termination (concurrent callers share it), bounded by the leave timeout,
and always answers: the preStop hook must get a reply, not a hang.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from raftset import contract
from raftset.sidecar.io.etcdclient import LockLost, Refusal
from raftset.sidecar.io.kube import SidecarKube
from raftset.sidecar.io.peers import Peers
from raftset.sidecar.metrics import STEP_LEAVE, Metrics
from raftset.sidecar.pure import leave
from raftset.sidecar.pure.backoff import Backoff
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells.plumbing import API_ERRORS, LOCK_NAME, RETRYABLE, report
from raftset.workloads import being_deleted

log = logging.getLogger("raftset.sidecar")


class LeaveShell:
    def __init__(self, settings: SidecarConfig, state: State, peers: Peers, kube: SidecarKube, metrics: Metrics) -> None:
        self.settings, self.state, self.peers, self.kube, self.metrics = settings, state, peers, kube, metrics
        self.task: asyncio.Task[dict[str, Any]] | None = None

    async def leave(self, trigger: str) -> dict[str, Any]:
        """Run the leave once (concurrent callers share it), bounded by the leave timeout."""
        if self.task is None or (self.task.done() and not self.task.result().get("final")):
            self.task = asyncio.create_task(self._bounded(trigger))
        return await asyncio.shield(self.task)

    async def _bounded(self, trigger: str) -> dict[str, Any]:
        started = time.monotonic()
        timeout = self.settings.leave_timeout
        try:
            async with asyncio.timeout(timeout):
                result = await self._leave()
        except TimeoutError:
            result = {"final": False, "action": "timeout", "reason": f"leave took over {timeout:g}s"}
        except RETRYABLE as exc:
            report(self.state, "leave", exc)
            result = {"final": False, "action": "error", "reason": str(exc)}
        except Exception as exc:  # noqa: BLE001 - the preStop hook must get an answer, not a hang
            log.exception("leave failed")
            result = {"final": False, "action": "error", "reason": f"{type(exc).__name__}: {exc}"}
        self.metrics.outcome(STEP_LEAVE, str(result.get("action")))
        result["seconds"] = round(time.monotonic() - started, 3)
        result["trigger"] = trigger
        log.info("leave (%s): %s", trigger, result)
        return result

    async def _leave(self) -> dict[str, Any]:
        settings = self.settings
        pod = await self.kube.pod(settings.pod_name)
        if not being_deleted(pod):
            return {"final": False, "action": "none", "reason": "this pod is not terminating: nothing to do"}
        workload = await self.peers.workload()
        fate = leave.fate(settings.ordinal, settings.backend, workload, pod or {})
        kept = settings.backend.kept(workload) if workload else []
        own_id = self.state.member_id or (self.state.status.member_id if self.state.status else None)
        if own_id is None:
            return {"final": True, "action": "none", "reason": "this sidecar never had a member"}
        self.state.phase = "leaving"
        client, members = await self.peers.etcd().member_list([settings.client_url, *self.peers.candidates(kept, [])])
        statuses = await self.peers.statuses(members)
        ordinals = self.peers.ordinals(members)
        hand_off = settings.engine.capabilities.hand_off
        terminating = await self._terminating(ordinals, own_id) if leave.wants_terminating(
            statuses, own_id, hand_off=hand_off) else set()
        decision = leave.decide(fate, own_id, members, statuses, ordinals, kept, hand_off=hand_off,
                                terminating=terminating)
        result: dict[str, Any] = {"final": True, "scaled_away": fate.scaled_away, "reason": decision.reason,
                                  "moved_leader_to": None, "removed": False}
        if decision.move_leader_to is not None:
            # On a refusal go on with the rest: etcd also hands leadership away when it stops.
            if await self.peers.move_leader(decision.move_leader_to, "leave"):
                result["moved_leader_to"] = f"{decision.move_leader_to:x}"
        if decision.remove:
            others = [u for m in members if m.id != own_id and not m.is_learner for u in m.client_urls]
            decision = await self._remove_self(fate, own_id, others, ordinals, kept)
            result["removed"] = decision.remove
            result["reason"] = decision.reason
            if decision.remove:
                log.warning("member %x removed itself: %s", own_id, fate.reason)
                self.state.phase = "left"
                await self.kube.delete_lease(contract.lease_name(settings.pod_name))
        result["action"] = "removed" if result["removed"] else "kept"
        return result

    async def _terminating(self, ordinals: dict[int, int | None], own_id: int) -> set[int]:
        """The other members' ordinals whose pods the API shows terminating now. A pod that cannot be
        read counts as not terminating: the hand-off then goes as it did before this was read."""
        found = set()
        for member_id, ordinal in ordinals.items():
            if member_id == own_id or ordinal is None:
                continue
            try:
                pod = await self.kube.pod(self.settings.naming.pod(ordinal))
            except API_ERRORS as exc:
                log.warning("leave: could not read the pod of ordinal %d: %s", ordinal, exc)
                continue
            if being_deleted(pod):
                found.add(ordinal)
        return found

    async def _remove_self(self, fate: leave.Fate, own_id: int, others: list[str],
                           ordinals: dict[int, int | None], kept: list[int]) -> leave.LeaveDecision:
        """MemberRemove of ourselves through another member, decided again under the lock.

        etcd refuses ("unhealthy cluster") while some voter connected less than 5 s ago;
        a refusal changed nothing, so asking again after a backoff is safe. Bounded by
        the leave timeout around the caller.
        """
        backoff = Backoff(0.5, 2.0)
        while True:
            client, _ = await self.peers.etcd().member_list(others)
            try:
                async with client.lock(LOCK_NAME, timeout=10) as held:
                    members = await client.member_list()
                    decision = leave.decide(fate, own_id, members, await self.peers.statuses(members), ordinals, kept,
                                        hand_off=self.settings.engine.capabilities.hand_off)
                    if not decision.remove:
                        return decision
                    await held.fence(client.timeout)
                    error = await self.peers.member_remove(client, own_id)
            except LockLost as exc:  # nothing was removed: decide again under a new lock
                log.warning("leave: %s; asking again", exc.message)
                await asyncio.sleep(backoff.next())
                continue
            if error is None or error.refusal is Refusal.MEMBER_NOT_FOUND:
                return decision
            if error.refusal not in (Refusal.UNHEALTHY, Refusal.NOT_ENOUGH_STARTED):
                raise error
            log.info("leave: %s; asking again", error.message)
            await asyncio.sleep(backoff.next())
