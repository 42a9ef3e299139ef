"""The imperative shell: gathers state, asks the pure decisions, carries out one step.

Lifecycle: join (until the startup file is written) -> heartbeat, promote and clean
loops -> leave (on /leave or SIGTERM). Errors never end the process: they are logged,
shown on /startup and /readyz, and retried after a capped backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timezone
from typing import Any

import aiohttp

from raftset import contract
from raftset.etcdclient import (
    ClientTLS,
    ClusterClient,
    EtcdClientError,
    Member,
    MemberClient,
    Refusal,
    Status,
    TLSConfigError,
)

from raftset.sidecar import clean, heartbeat, join, leave, marker
from raftset.sidecar.config import Settings
from raftset.sidecar.heartbeat import Heartbeat
from raftset.sidecar.kube import Kube, KubeError
from raftset.sidecar.metrics import Metrics
from raftset.sidecar.quorum import safe_to_remove

log = logging.getLogger("raftset.sidecar")

LOCK_NAME = "raftset/membership"
# Everything a step may raise that means "try again later", not "crash".
RETRYABLE = (EtcdClientError, KubeError, aiohttp.ClientError, TLSConfigError, OSError, TimeoutError)
PROMOTE_POLL_S = 0.25  # how often a starting or learning member checks whether it may be promoted


class Backoff:
    """Capped exponential backoff with a little jitter, so peers do not retry in step."""

    def __init__(self, initial: float = 0.5, cap: float = 10.0) -> None:
        self.initial, self.cap = initial, cap
        self.current = initial

    def next(self) -> float:
        delay = self.current
        self.current = min(self.current * 2, self.cap)
        return delay * random.uniform(0.8, 1.2)

    def reset(self) -> None:
        self.current = self.initial


class Agent:
    def __init__(self, settings: Settings, kube: Kube) -> None:
        self.s = settings
        self.kube = kube
        self.metrics = Metrics()
        self.phase = "joining"  # joining | started | leaving | left
        self.startup_written = False
        self.last_error = ""
        self.status: Status | None = None
        self.member_id: int | None = None
        self.heartbeat = heartbeat.beat(settings.pod_name, None, datetime.now(timezone.utc))
        self.stopping = asyncio.Event()
        self._etcd: ClusterClient | None = None
        self._leave_task: asyncio.Task[dict[str, Any]] | None = None
        self._absent: dict[int, float] = {}
        self._lease_written: Heartbeat | None = None
        self._lease_written_at: float | None = None
        self._label_written: str | None = None
        self._lease_retry_at = 0.0
        self._lease_backoff = Backoff(1.0, max(1.0, settings.heartbeat_interval))
        self._beat_lock = asyncio.Lock()
        self._workload_owner: dict[str, Any] | None = None

    # ---- plumbing

    def etcd(self) -> ClusterClient:
        """The etcd clients, created once the TLS files (if any) load."""
        if self._etcd is None:
            tls = ClientTLS.load(self.s.tls) if self.s.tls else None
            self._etcd = ClusterClient(tls, timeout=5.0)
        return self._etcd

    @property
    def local(self) -> MemberClient:
        return self.etcd().member(self.s.client_url)

    @property
    def ready(self) -> bool:
        st = self.status
        return (self.phase == "started" and st is not None and not st.is_learner and st.leader != 0
                and not st.errors)

    def _error(self, where: str, exc: BaseException) -> None:
        message = f"{where}: {exc}"
        if isinstance(exc, TLSConfigError):
            message = f"{where}: bad TLS material: {exc}"
        if message != self.last_error:
            log.error("%s", message)
        else:
            log.debug("%s (again)", message)
        self.last_error = message

    async def sleep(self, seconds: float) -> bool:
        """Sleep unless stopping; True if the sidecar is stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), timeout=seconds)
        return self.stopping.is_set()

    async def close(self) -> None:
        if self._etcd is not None:
            await self._etcd.close()
        await self.kube.close()

    # ---- main

    async def run(self) -> None:
        await self.join()
        if self.stopping.is_set():
            return
        tasks = [
            asyncio.create_task(self._loop(self.s.poll_interval, self.beat_once, "heartbeat")),
            asyncio.create_task(self.promote_loop()),
            asyncio.create_task(self._loop(self.s.clean_interval, self.clean_once, "clean")),
        ]
        await self.stopping.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _loop(self, interval: float, step: Callable[[], Awaitable[None]], name: str) -> None:
        while not self.stopping.is_set():
            try:
                await step()
            except RETRYABLE as exc:
                self._error(name, exc)
            if await self.sleep(interval):
                return

    # ---- join

    async def join(self) -> None:
        backoff = Backoff(0.5, 10.0)
        while not self.stopping.is_set():
            self.metrics.join_attempts += 1
            try:
                progressed = await self.join_step()
            except RETRYABLE as exc:
                self._error("join", exc)
                progressed = False
            if self.startup_written:
                self.last_error = ""
                return
            if progressed:
                backoff.reset()
                continue
            if await self.sleep(backoff.next()):
                return

    def _candidates(self, kept: Sequence[int], leases: Sequence[dict[str, Any]],
                    members: Sequence[Member] = ()) -> list[str]:
        """Client URLs of every other member we could ask, known ones first."""
        urls = [u for m in members if not m.is_learner for u in m.client_urls]
        ordinals = set(kept)
        for lease in leases:
            holder = (lease.get("spec") or {}).get("holderIdentity") or ""
            ordinal = self.s.naming.ordinal_of_name(holder)
            if ordinal is not None:
                ordinals.add(ordinal)
        urls += [self.s.naming.client_url(o) for o in sorted(ordinals) if o != self.s.ordinal]
        own = self.s.client_url
        return [u for u in dict.fromkeys(urls) if u != own]

    async def _view(self) -> tuple[join.JoinView, MemberClient | None, list[str]]:
        etcd = self.etcd()
        workload = await self.kube.workload(self.s.backend, self.s.workload_name)
        if workload is None:
            raise KubeError("GET", f"workload {self.s.workload_name}", 404, "not found (yet)")
        self._workload_owner = heartbeat.owner_reference(workload)
        kept = self.s.backend.kept(workload)
        leases = await self.kube.member_leases(self.s.cluster)
        evidence = any((ls.get("spec") or {}).get("holderIdentity") not in (None, self.s.pod_name) for ls in leases)
        urls = self._candidates(kept, leases)
        client: MemberClient | None = None
        members: list[Member] | None = None
        if urls:
            try:
                client, members = await etcd.member_list(urls)
            except EtcdClientError as exc:
                # Expected while a new cluster bootstraps; worth a warning once one exists.
                log.log(logging.WARNING if evidence else logging.INFO,
                        "no member answered MemberList at %s: %s", ", ".join(urls), exc)
        view = join.JoinView(
            name=self.s.pod_name, ordinal=self.s.ordinal, peer_url=self.s.peer_url, kept=kept,
            has_data=marker.has_data(self.s.data_dir), marker=marker.read(self.s.marker_path),
            members=members, cluster_evidence=evidence,
        )
        return view, client, urls

    async def join_step(self) -> bool:
        """One decision and at most one change; True if it made progress."""
        view, client, urls = await self._view()
        plan = join.decide(view)
        log.info("join: %s (%s)", plan.action.value, plan.reason)
        A = join.Action
        if plan.action is A.BOOTSTRAP:
            self._write_startup("new", {self.s.pod_name: self.s.peer_url})
            return True
        if plan.action is A.REJOIN:
            cluster = self._cluster_map(view.members, plan.member_id) if view.members else (
                (view.marker.initial_cluster if view.marker and view.marker.initial_cluster else None)
                or {self.s.pod_name: self.s.peer_url})
            if plan.member_id is not None:
                self._write_marker(plan.member_id, cluster)
            self._write_startup("existing", cluster)
            return True
        if plan.action is A.MOVE_ASIDE:
            dest = marker.move_aside(self.s.data_dir, self.s.marker_path)
            log.warning("stale data dir moved aside to %s: %s", dest, plan.reason)
            return True
        if plan.action is A.WAIT:
            self.last_error = f"waiting: {plan.reason}" + (f" (asked {', '.join(urls)})" if urls else "")
            return False
        assert client is not None and view.members is not None
        if plan.action is A.REUSE_ENTRY:
            assert plan.member_id is not None
            cluster = self._cluster_map(view.members, plan.member_id)
            self._write_marker(plan.member_id, cluster)
            self._write_startup("existing", cluster)
            return True
        if plan.action is A.ADD_LEARNER:
            return await self._add_learner(client)
        if plan.action is A.REMOVE_ENTRY:
            assert plan.member_id is not None
            return await self._remove_entry(client, plan.member_id)
        raise AssertionError(plan.action)

    async def _add_learner(self, client: MemberClient) -> bool:
        async with client.lock(LOCK_NAME, timeout=10):
            # Decide again under the lock: someone may have changed membership meanwhile.
            view, _, _ = await self._view()
            members = await client.member_list()
            view = dataclasses.replace(view, members=members)
            if join.decide(view).action is not join.Action.ADD_LEARNER:
                return True
            try:
                added, members = await client.add_learner(self.s.peer_url)
            except EtcdClientError as exc:
                self.metrics.count("add", False)
                if exc.refusal is Refusal.TOO_MANY_LEARNERS:
                    self.last_error = "waiting: another learner is still joining"
                    return False
                # A lost reply may still have added us: the next MemberList will tell.
                raise
            self.metrics.count("add", True)
        log.info("added member %s as learner with peer URL %s", added.hex_id, self.s.peer_url)
        cluster = self._cluster_map(members, added.id)
        self._write_marker(added.id, cluster)
        self._write_startup("existing", cluster)
        return True

    async def _remove_entry(self, client: MemberClient, member_id: int) -> bool:
        """Remove the entry our empty data dir left behind, decided again under the lock."""
        async with client.lock(LOCK_NAME, timeout=10):
            members = await client.member_list()
            statuses = await self._statuses(members)
            voters = frozenset(m.id for m in members if not m.is_learner)
            if not safe_to_remove(voters, frozenset(i for i, s in statuses.items() if s), member_id):
                self.last_error = f"waiting: removing our old entry {member_id:x} would lose quorum"
                return False
            error = await self._member_remove(client, member_id)
        if error is not None and error.refusal is not Refusal.MEMBER_NOT_FOUND:
            raise error
        log.warning("removed our old member entry %x: our data dir was empty", member_id)
        return True

    async def _member_remove(self, client: MemberClient, member_id: int) -> EtcdClientError | None:
        """One MemberRemove, never retried here; etcd's refusal is returned for the caller to judge."""
        try:
            await client.remove(member_id)
        except EtcdClientError as exc:
            self.metrics.count("remove", False)
            return exc
        self.metrics.count("remove", True)
        return None

    def _cluster_map(self, members: Sequence[Member] | None, own_id: int | None) -> dict[str, str]:
        return join.initial_cluster(self.s.pod_name, self.s.peer_url, members or (), self.s.naming, own_id)

    def _write_marker(self, member_id: int, cluster: dict[str, str]) -> None:
        self.member_id = member_id
        marker.write(self.s.marker_path, marker.Marker(member_id, self.s.pod_name, self.s.peer_url, cluster))

    def _write_startup(self, state: str, cluster: dict[str, str]) -> None:
        inputs = join.StartupInputs(
            name=self.s.pod_name, naming=self.s.naming, data_dir=self.s.data_dir,
            peer_url=self.s.peer_url, client_url=self.s.client_url,
            listen_peer_url=self.s.listen_peer_url, listen_client_url=self.s.listen_client_url,
            cluster_token=self.s.cluster_token, tls=self.s.tls, options=self.s.options,
        )
        text = self.s.engine.render_startup(join.startup_config(inputs, state, cluster))
        marker.write_atomic(self.s.startup_path, text)
        log.info("startup file %s written (state %s, cluster %s)", self.s.startup_path, state,
                 ",".join(f"{k}={v}" for k, v in sorted(cluster.items())))
        self.startup_written = True
        self.phase = "started"

    async def _statuses(self, members: Sequence[Member]) -> dict[int, Status | None]:
        """Status of every member by id; None where it did not answer as itself."""
        urls = {m.id: m.client_urls[0] for m in members if m.client_urls}
        answers = await self.etcd().statuses(urls.values(), timeout=2.0)
        out: dict[int, Status | None] = {}
        for m in members:
            st = answers.get(urls.get(m.id, ""))
            out[m.id] = st if st is not None and st.member_id == m.id else None
        return out

    def _ordinals(self, members: Sequence[Member]) -> dict[int, int | None]:
        return {m.id: self.s.naming.ordinal_of_member(m.name, m.peer_urls) for m in members}

    # ---- heartbeat

    async def beat_once(self) -> None:
        """Poll the member and publish; serialised, so an older poll never overwrites a newer one."""
        async with self._beat_lock:
            try:
                status = await self.local.status(timeout=min(self.s.poll_interval, 3.0))
            except EtcdClientError as exc:
                status = None
                if self.phase == "started":
                    log.debug("local member not answering: %s", exc)
            self.status = status
            if status is not None:
                if self.member_id != status.member_id:
                    # Bootstrapped or rejoined without MemberList: the id is known only now.
                    old = marker.read(self.s.marker_path)
                    self._write_marker(status.member_id, old.initial_cluster if old else {})
                if self.last_error and self.ready:
                    self.last_error = ""
            self.heartbeat = heartbeat.beat(self.s.pod_name, status, datetime.now(timezone.utc), self.member_id)
            await self.publish()

    async def publish(self) -> None:
        """The Lease and the pod's role label, on change plus a slow refresh."""
        if self.phase in ("left",):
            return
        hb = self.heartbeat
        now = time.monotonic()
        due = heartbeat.should_write(self._lease_written, hb, self._lease_written_at, now, self.s.heartbeat_interval)
        if due and now >= self._lease_retry_at:
            body = heartbeat.lease_body(
                self.s.pod_name, self.s.namespace, self.s.cluster, hb,
                duration=max(1, round(3 * self.s.heartbeat_interval)), owner=self._workload_owner,
                extra_labels={contract.LABEL_ENGINE: self.s.engine.name},
            )
            try:
                await self.kube.apply_lease(body)
                self.metrics.lease_writes["ok"] += 1
                self._lease_written, self._lease_written_at = hb, now
                self._lease_backoff.reset()
            except (KubeError, aiohttp.ClientError, TimeoutError) as exc:
                # A refused write is not retried on every poll: back off up to the refresh.
                self.metrics.lease_writes["error"] += 1
                self._lease_retry_at = now + self._lease_backoff.next()
                self._error("heartbeat lease", exc)
        if self._label_written != hb.role:
            try:
                await self.kube.label_pod(self.s.pod_name, {contract.LABEL_ROLE: hb.role})
                self._label_written = hb.role
            except (KubeError, aiohttp.ClientError, TimeoutError) as exc:
                self._error("role label", exc)

    # ---- promote

    async def promote_loop(self) -> None:
        """Promote this member as soon as etcd accepts it.

        Until the store answers as a voter, its status is polled here, faster than the
        heartbeat does: a learner adds load to the leader without counting for quorum,
        and the operator's next scale step waits for it.
        """
        backoff = Backoff(PROMOTE_POLL_S, 2.0)
        while not self.stopping.is_set() and self.phase == "started":
            if self.status is None or self.status.is_learner:
                await self.beat_once()  # not yet voting: poll (and publish) at the promote pace
            status = self.status
            if status is None:
                delay = PROMOTE_POLL_S
            elif status.is_learner:
                try:
                    if await self.promote_once(status):
                        backoff.reset()
                        continue
                except RETRYABLE as exc:
                    self._error("promote", exc)
                delay = backoff.next()
            else:
                backoff.reset()
                delay = min(self.s.poll_interval, 1.0)
            if await self.sleep(delay):
                return

    async def promote_once(self, status: Status) -> bool:
        workload = await self.kube.workload(self.s.backend, self.s.workload_name)
        kept = self.s.backend.kept(workload) if workload else []
        client, members = await self.etcd().member_list(self._candidates(kept, []))
        own = next((m for m in members if m.id == status.member_id), None)
        if own is None or not own.is_learner:
            return False
        try:
            await client.promote(own.id)
        except EtcdClientError as exc:
            if exc.refusal in (Refusal.LEARNER_NOT_READY, Refusal.NOT_A_LEARNER):
                log.info("promote %s: %s", own.hex_id, exc.message)
                self.metrics.count("promote", exc.refusal is Refusal.NOT_A_LEARNER)
                return False
            self.metrics.count("promote", False)
            raise
        self.metrics.count("promote", True)
        log.info("promoted member %s to voting member", own.hex_id)
        await self.beat_once()  # the operator waits for this voter: tell it now, not at the next poll
        return True

    # ---- clean

    async def clean_once(self) -> None:
        status = self.status
        if self.phase != "started" or status is None or not status.is_leader:
            self._absent = {}
            return
        workload = await self.kube.workload(self.s.backend, self.s.workload_name)
        if workload is None or (workload.get("metadata") or {}).get("deletionTimestamp"):
            return
        kept = self.s.backend.kept(workload)
        members = await self.local.member_list()
        statuses = await self._statuses(members)
        answering = frozenset(i for i, st in statuses.items() if st is not None)
        now = time.monotonic()
        self._absent = clean.absences(self._absent, members, answering, now)
        ordinals = self._ordinals(members)
        decision = clean.plan(leading=True, members=members, ordinal_of=ordinals, kept=kept,
                              absent_since=self._absent, answering=answering, now=now, grace=self.s.clean_grace)
        log.debug("clean: %s", decision.reason)
        if decision.remove is None:
            return
        async with self.local.lock(LOCK_NAME, timeout=10):
            members = await self.local.member_list()
            statuses = await self._statuses(members)
            answering = frozenset(i for i, st in statuses.items() if st is not None)
            again = clean.plan(leading=True, members=members, ordinal_of=self._ordinals(members), kept=kept,
                               absent_since=self._absent, answering=answering, now=now, grace=self.s.clean_grace)
            if again.remove != decision.remove:
                return
            try:
                await self.local.remove(decision.remove)
            except EtcdClientError:
                self.metrics.count("clean_remove", False)
                raise
        self.metrics.count("clean_remove", True)
        self._absent.pop(decision.remove, None)
        log.warning("clean: removed member %x (ordinal %s): %s", decision.remove,
                    ordinals.get(decision.remove), decision.reason)

    # ---- leave

    async def leave(self, trigger: str) -> dict[str, Any]:
        """Run the leave once (concurrent callers share it), bounded by the leave timeout."""
        if self._leave_task is None or (self._leave_task.done() and not self._leave_task.result().get("final")):
            self._leave_task = asyncio.create_task(self._leave_bounded(trigger))
        return await asyncio.shield(self._leave_task)

    async def _leave_bounded(self, trigger: str) -> dict[str, Any]:
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.s.leave_timeout):
                result = await self._leave(trigger)
        except TimeoutError:
            result = {"final": False, "action": "timeout", "reason": f"leave took over {self.s.leave_timeout:g}s"}
        except RETRYABLE as exc:
            self._error("leave", exc)
            result = {"final": False, "action": "error", "reason": str(exc)}
        except Exception as exc:  # noqa: BLE001 - the preStop hook must get an answer, not a hang
            log.exception("leave failed")
            result = {"final": False, "action": "error", "reason": f"{type(exc).__name__}: {exc}"}
        result["seconds"] = round(time.monotonic() - started, 3)
        result["trigger"] = trigger
        log.info("leave (%s): %s", trigger, result)
        return result

    async def _leave(self, trigger: str) -> dict[str, Any]:
        pod = await self.kube.pod(self.s.pod_name)
        if pod is None or not (pod.get("metadata") or {}).get("deletionTimestamp"):
            return {"final": False, "action": "none", "reason": "this pod is not terminating: nothing to do"}
        workload = await self.kube.workload(self.s.backend, self.s.workload_name)
        fate = leave.fate(self.s.ordinal, self.s.backend, workload, pod)
        kept = self.s.backend.kept(workload) if workload else []
        own_id = self.member_id or (self.status.member_id if self.status else None)
        if own_id is None:
            return {"final": True, "action": "none", "reason": "this sidecar never had a member"}
        self.phase = "leaving"
        etcd = self.etcd()
        urls = [self.s.client_url, *self._candidates(kept, [])]
        client, members = await etcd.member_list(urls)
        statuses = await self._statuses(members)
        ordinals = self._ordinals(members)
        decision = leave.plan(fate, own_id, members, statuses, ordinals, kept,
                              hand_off=self.s.engine.capabilities.hand_off)
        result: dict[str, Any] = {"final": True, "scaled_away": fate.scaled_away, "reason": decision.reason,
                                  "moved_leader_to": None, "removed": False}
        if decision.move_leader_to is not None:
            try:
                await self.local.move_leader(decision.move_leader_to, timeout=5.0)
                self.metrics.count("move_leader", True)
                result["moved_leader_to"] = f"{decision.move_leader_to:x}"
                log.info("leadership moved to %x", decision.move_leader_to)
            except EtcdClientError as exc:
                # etcd also hands leadership away when it stops; go on with the rest.
                self.metrics.count("move_leader", False)
                self._error("move leader", exc)
        if decision.remove:
            others = [u for m in members if m.id != own_id and not m.is_learner for u in m.client_urls]
            decision = await self._remove_self(fate, own_id, others, ordinals, kept)
            result["removed"] = decision.remove
            result["reason"] = decision.reason
            if decision.remove:
                log.warning("member %x removed itself: %s", own_id, fate.reason)
                self.phase = "left"
                await self.kube.delete_lease(contract.lease_name(self.s.pod_name))
        result["action"] = "removed" if result["removed"] else "kept"
        return result

    async def _remove_self(self, fate: leave.Fate, own_id: int, others: list[str],
                           ordinals: dict[int, int | None], kept: list[int]) -> leave.LeavePlan:
        """MemberRemove of ourselves through another member, decided again under the lock.

        etcd refuses ("unhealthy cluster") while some voter connected less than 5 s ago;
        a refusal changed nothing, so asking again after a backoff is safe. Bounded by
        the leave timeout around the caller.
        """
        backoff = Backoff(0.5, 2.0)
        while True:
            client, _ = await self.etcd().member_list(others)
            async with client.lock(LOCK_NAME, timeout=10):
                members = await client.member_list()
                statuses = await self._statuses(members)
                decision = leave.plan(fate, own_id, members, statuses, ordinals, kept,
                                      hand_off=self.s.engine.capabilities.hand_off)
                if not decision.remove:
                    return decision
                error = await self._member_remove(client, own_id)
            if error is None or error.refusal is Refusal.MEMBER_NOT_FOUND:
                return decision
            if error.refusal not in (Refusal.UNHEALTHY, Refusal.NOT_ENOUGH_STARTED):
                raise error
            log.info("leave: %s; asking again", error.message)
            await asyncio.sleep(backoff.next())

    def stop(self) -> None:
        self.stopping.set()


async def leave_then_stop(agent: Agent, trigger: str) -> None:
    """SIGTERM: leave if /leave did not run yet, then stop."""
    with contextlib.suppress(Exception):
        await agent.leave(trigger)
    agent.stop()

