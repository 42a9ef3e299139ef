"""The leave shell: on preStop or SIGTERM, hand leadership away and leave only if scaled away.

Runs once per termination (concurrent callers share it), bounded by the leave timeout,
and always answers: the preStop hook must get a reply, not a hang.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from raftset import contract
from raftset.sidecar.io.etcdclient import LockLost, Refusal
from raftset.sidecar.pure import leave
from raftset.sidecar.metrics import STEP_LEAVE
from raftset.sidecar.pure.backoff import Backoff
from raftset.sidecar.shells.plumbing import LOCK_NAME, RETRYABLE, Shell
from raftset.workloads import being_deleted

if TYPE_CHECKING:
    from raftset.sidecar.agent import Agent

log = logging.getLogger("raftset.sidecar")


class Leaver(Shell):
    def __init__(self, agent: Agent) -> None:
        super().__init__(agent)
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
            self.agent.error("leave", exc)
            result = {"final": False, "action": "error", "reason": str(exc)}
        except Exception as exc:  # noqa: BLE001 - the preStop hook must get an answer, not a hang
            log.exception("leave failed")
            result = {"final": False, "action": "error", "reason": f"{type(exc).__name__}: {exc}"}
        self.agent.metrics.outcome(STEP_LEAVE, str(result.get("action")))
        result["seconds"] = round(time.monotonic() - started, 3)
        result["trigger"] = trigger
        log.info("leave (%s): %s", trigger, result)
        return result

    async def _leave(self) -> dict[str, Any]:
        agent, settings = self.agent, self.settings
        pod = await agent.kube.pod(settings.pod_name)
        if not being_deleted(pod):
            return {"final": False, "action": "none", "reason": "this pod is not terminating: nothing to do"}
        workload = await agent.workload()
        fate = leave.fate(settings.ordinal, settings.backend, workload, pod or {})
        kept = settings.backend.kept(workload) if workload else []
        own_id = agent.member_id or (agent.status.member_id if agent.status else None)
        if own_id is None:
            return {"final": True, "action": "none", "reason": "this sidecar never had a member"}
        agent.phase = "leaving"
        client, members = await agent.etcd().member_list([settings.client_url, *agent.candidates(kept, [])])
        statuses = await agent.statuses(members)
        ordinals = agent.ordinals(members)
        decision = leave.decide(fate, own_id, members, statuses, ordinals, kept,
                              hand_off=settings.engine.capabilities.hand_off)
        result: dict[str, Any] = {"final": True, "scaled_away": fate.scaled_away, "reason": decision.reason,
                                  "moved_leader_to": None, "removed": False}
        if decision.move_leader_to is not None:
            # On a refusal go on with the rest: etcd also hands leadership away when it stops.
            if await agent.move_leader(decision.move_leader_to, "leave"):
                result["moved_leader_to"] = f"{decision.move_leader_to:x}"
        if decision.remove:
            others = [u for m in members if m.id != own_id and not m.is_learner for u in m.client_urls]
            decision = await self._remove_self(fate, own_id, others, ordinals, kept)
            result["removed"] = decision.remove
            result["reason"] = decision.reason
            if decision.remove:
                log.warning("member %x removed itself: %s", own_id, fate.reason)
                agent.phase = "left"
                await agent.kube.delete_lease(contract.lease_name(settings.pod_name))
        result["action"] = "removed" if result["removed"] else "kept"
        return result

    async def _remove_self(self, fate: leave.Fate, own_id: int, others: list[str],
                           ordinals: dict[int, int | None], kept: list[int]) -> leave.LeaveDecision:
        """MemberRemove of ourselves through another member, decided again under the lock.

        etcd refuses ("unhealthy cluster") while some voter connected less than 5 s ago;
        a refusal changed nothing, so asking again after a backoff is safe. Bounded by
        the leave timeout around the caller.
        """
        agent = self.agent
        backoff = Backoff(0.5, 2.0)
        while True:
            client, _ = await agent.etcd().member_list(others)
            try:
                async with client.lock(LOCK_NAME, timeout=10) as held:
                    members = await client.member_list()
                    decision = leave.decide(fate, own_id, members, await agent.statuses(members), ordinals, kept,
                                        hand_off=self.settings.engine.capabilities.hand_off)
                    if not decision.remove:
                        return decision
                    await held.fence(client.timeout)
                    error = await agent.member_remove(client, own_id)
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
