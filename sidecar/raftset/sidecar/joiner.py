"""The join shell: gather what join.decide needs, carry out one step, decide again.

Runs until the startup file is written. A crash between steps is never worse than a
fresh start: every step is decided from what etcd, the API and the data dir say now, and
membership changes are decided once more under the membership lock.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid

from raftset import contract
from raftset.etcdclient import EtcdClientError, Member, MemberClient, Refusal
from raftset.sidecar import datadir, heartbeat, join, marker, repair
from raftset.sidecar.kube import KubeError
from raftset.sidecar.metrics import STEP_JOIN
from raftset.sidecar.plumbing import Backoff, LOCK_NAME, RETRYABLE, Shell
from raftset.sidecar.quorum import may_remove

log = logging.getLogger("raftset.sidecar")


class Joiner(Shell):

    async def run(self) -> None:
        agent = self.agent
        backoff = Backoff(0.5, 10.0)
        while not agent.stopping.is_set():
            agent.metrics.join_attempt()
            try:
                progressed = await self.step()
            except RETRYABLE as exc:
                agent.error("join", exc)
                agent.metrics.outcome(STEP_JOIN, "error")
                progressed = False
            if agent.startup_written:
                agent.last_error = ""
                return
            if progressed:
                backoff.reset()
                continue
            delay = backoff.next()
            log.info("join: no progress; next attempt in %.2f s", delay)
            if await agent.sleep(delay):
                return

    async def view(self) -> tuple[join.JoinView, MemberClient | None, list[str]]:
        settings, agent = self.settings, self.agent
        agent.etcd()  # loads the TLS files: bad ones stop the join here, with a clear error
        workload = await agent.workload()
        if workload is None:
            raise KubeError("GET", f"workload {settings.workload_name}", 404, "not found (yet)")
        agent.workload_owner = heartbeat.owner_reference(workload)
        agent.cluster_owner = heartbeat.cluster_owner(workload)
        kept = settings.backend.kept(workload)
        leases = await agent.kube.member_leases(settings.cluster)
        evidence = join.cluster_evidence(leases, settings.pod_name)
        urls = agent.candidates(kept, leases)
        client: MemberClient | None = None
        members: list[Member] | None = None
        linearizable = False
        if urls:
            try:
                client, members, linearizable = await agent.authoritative_members(urls)
            except EtcdClientError as exc:
                # Expected while a new cluster bootstraps; worth a warning once one exists.
                log.log(logging.WARNING if evidence else logging.INFO,
                        "no member answered MemberList at %s: %s", ", ".join(urls), exc)
        alone = settings.engine.capabilities.bootstrap_alone
        formed = False
        if not alone and urls:
            # The initial set bootstraps together only while no member ever had a leader.
            answers = await agent.etcd().statuses(urls, timeout=settings.peer_status_timeout)
            formed = join.cluster_formed(leases, settings.pod_name, [st for st in answers.values() if st is not None])
        view = join.JoinView(
            name=settings.pod_name, ordinal=settings.ordinal, peer_url=settings.peer_url, kept=kept,
            has_data=marker.has_data(settings.data_dir), marker=marker.read(settings.marker_path),
            members=members, cluster_evidence=evidence, linearizable=linearizable,
            local_member=await agent.local_member(), bootstrap_alone=alone,
            initial_peers={} if alone else settings.naming.initial_cluster(kept), formed=formed,
        )
        return view, client, urls

    async def step(self) -> bool:
        """One decision and at most one change; True if it made progress."""
        settings = self.settings
        recovered = await self.agent.recoverer.before_join()
        if recovered is not None:
            return recovered
        view, client, urls = await self.view()
        decision = join.decide(view)
        log.info("join: %s (%s)", decision.action.value, decision.reason)
        self.agent.metrics.outcome(STEP_JOIN, decision.action.value)
        action = join.Action
        if decision.action is action.BOOTSTRAP:
            # A cluster seeded from a backup: the snapshot is restored first, or nothing starts.
            if not await self.agent.restorer.prepare():
                return False
            self.write_startup("new", join.bootstrap_cluster(view))
            return True
        if decision.action is action.REJOIN:
            cluster = join.rejoin_cluster(view, decision.member_id, settings.naming)
            if decision.member_id is not None:
                self.agent.remember_member(decision.member_id, cluster)
            self.write_startup("existing", cluster)
            return True
        if decision.action is action.MOVE_ASIDE:
            dest = datadir.move_aside(settings.data_dir, settings.marker_path, decision.reason)
            log.warning("data dir moved aside to %s (kept until the new member votes): %s", dest, decision.reason)
            return True
        if decision.action is action.WAIT:
            self.agent.last_error = f"waiting: {decision.reason}" + (f" (asked {', '.join(urls)})" if urls else "")
            return False
        assert client is not None and view.members is not None
        if decision.action is action.REUSE_ENTRY:
            assert decision.member_id is not None
            cluster = self.cluster_map(view.members, decision.member_id)
            self.agent.remember_member(decision.member_id, cluster)
            self.write_startup("existing", cluster)
            return True
        if decision.action is action.ADD_LEARNER:
            return await self.add_learner(client)
        if decision.action is action.REMOVE_ENTRY:
            assert decision.member_id is not None
            return await self.remove_entry(client, decision.member_id, decision.reason)
        raise AssertionError(decision.action)

    async def add_learner(self, client: MemberClient) -> bool:
        agent, settings = self.agent, self.settings
        async with client.lock(LOCK_NAME, timeout=10) as held:
            # Decide again under the lock: someone may have changed membership meanwhile.
            view, _, _ = await self.view()
            view = dataclasses.replace(view, members=await client.member_list(), linearizable=False)
            if join.decide(view).action is not join.Action.ADD_LEARNER:
                return True
            await held.fence(client.timeout)  # LockLost unless the lock outlives the MemberAdd
            try:
                added, members = await client.add_learner(settings.peer_url)
            except EtcdClientError as exc:
                agent.metrics.count("add", False)
                if exc.refusal is Refusal.TOO_MANY_LEARNERS:
                    agent.last_error = "waiting: another learner is still joining"
                    return False
                # A lost reply may still have added us: the next MemberList will tell.
                raise
            agent.metrics.count("add", True)
        log.info("added member %s as learner with peer URL %s", added.hex_id, settings.peer_url)
        cluster = self.cluster_map(members, added.id)
        agent.remember_member(added.id, cluster)
        self.write_startup("existing", cluster)
        return True

    async def remove_entry(self, client: MemberClient, member_id: int, found: str) -> bool:
        """Remove the entry our empty data dir left behind, decided again under the lock; then record it on our
        pod as a replacement (a lost volume) that the repairer finishes and the operator narrates."""
        agent = self.agent
        async with client.lock(LOCK_NAME, timeout=10) as held:
            members = await client.member_list()
            if not may_remove(members, await agent.statuses(members), member_id):
                agent.last_error = f"waiting: removing our old entry {member_id:x} would lose quorum"
                return False
            await held.fence(client.timeout)
            error = await agent.member_remove(client, member_id)
        if error is not None and error.refusal is not Refusal.MEMBER_NOT_FOUND:
            raise error
        log.warning("removed our old member entry %x: our data dir was empty", member_id)
        record = repair.lost_volume(member_id, found, uuid.uuid4().hex[:8])
        try:
            await agent.kube.annotate_pod(self.settings.pod_name,
                                          {contract.ANNOTATION_REPLACE_PROGRESS: record.to_json()})
        except KubeError as exc:  # the join goes on; only its narration is lost
            log.warning("member %x removed, but its record could not be written on our pod: %s", member_id, exc)
        return True

    def cluster_map(self, members: list[Member], own_id: int | None) -> dict[str, str]:
        settings = self.settings
        return join.initial_cluster(settings.pod_name, settings.peer_url, members, settings.naming, own_id)

    def write_startup(self, state: str, cluster: dict[str, str], *, force_new_cluster: bool = False) -> None:
        settings = self.settings
        inputs = join.StartupInputs(
            name=settings.pod_name, naming=settings.naming, data_dir=settings.data_dir,
            peer_url=settings.peer_url, client_url=settings.client_url,
            listen_peer_url=settings.listen_peer_url, listen_client_url=settings.listen_client_url,
            cluster_token=settings.cluster_token, tls=settings.tls, options=settings.options,
            listen_metrics_url=settings.listen_metrics_url,
        )
        config = dataclasses.replace(join.startup_config(inputs, state, cluster), force_new_cluster=force_new_cluster)
        text = settings.engine.render_startup(config)
        marker.write_atomic(settings.startup_path, text)
        log.info("startup file %s written (state %s, cluster %s)", settings.startup_path, state,
                 ",".join(f"{k}={v}" for k, v in sorted(cluster.items())))
        self.agent.startup_written = True
        self.agent.phase = "started"
