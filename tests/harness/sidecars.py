"""Standing in for the sidecars of kwok pods: what each real sidecar would write, decided by its own code.

In the k8s and e2e tiers the pods are kwok pods: no store runs in them. `Sidecars` models one
cluster's Raft membership and, for every pod, does what that pod's sidecar would do, through
the sidecar's own decisions (`raftset.sidecar.pure.leave`, `clean`, `quorum`, `heartbeat`,
`membership`), and writes what it would write through the real API:

- joining: a Running pod whose ordinal has no member is added as a learner that has not
  started, starts, then is promoted; one join at a time, only while there is a leader. A new
  cluster forms from the kept ordinals once a quorum of them runs (all at once where the engine
  bootstraps together, else the lowest ordinal alone). A re-joined ordinal gets a new member id.
- the heartbeat Lease (`heartbeat.lease_body`, with the engine label), owned by the workload the
  pod's sidecar read when it started (`heartbeat.owner_reference`); written on a change of member
  id, role or health plus the cluster's slow refresh (`heartbeat.should_write`), lasting three
  refreshes (the sidecar's `lease_duration`); the pod's role label on a change of role.
- the membership Lease (`membership.lease_body`) the leader publishes, owned by the cluster object
  (`heartbeat.cluster_owner`), on a change plus the refresh (`membership.should_publish`), with
  each answering member's raft index.
- leaving: a pod seen terminating (or gone) runs its preStop once: `leave.fate` over the workload
  as it is at that moment and `leave.decide` over the modelled members. A scaled-away member
  removes itself and deletes its Lease, unless its ordinal is in `refusing` (its removal is
  refused: the member stays in Raft without a pod); a restarting one keeps its member and its
  Lease, which goes stale. A leader hands leadership to `leave.transfer_target` where the engine
  can (`Capabilities.hand_off`); elsewhere (Xline) it just stops and the running voters elect a
  leader one tick later.
- membership-clean (`clean.decide`) by the leader, with the cluster's grace period.

The raft index grows by one per tick, the term by one per leader change. Setting `leader`
moves leadership there (a MoveLeader) as soon as that ordinal is a running voter.

What the model cannot see: a preStop runs when the stand-in first notices the pod terminating
(or gone), with the workload as it is then, up to one `interval` after the real hook would. The
hooks it notices in one tick run side by side, as real ones would (each pod's store runs until
its own hook ends), one membership change at a time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from raftset import contract, engines
from raftset.contract import quorum
from raftset.engines import Engine
from raftset.sidecar.io.etcdclient import Member, Status
from raftset.membership import RaftMembership
from raftset.sidecar.pure import leave
from raftset.sidecar.pure import clean
from raftset.sidecar.pure import membership
from raftset.sidecar.pure import readiness
from raftset.sidecar.pure import heartbeat
from raftset.sidecar.pure.heartbeat import Heartbeat
from raftset.workloads import BACKENDS, Backend
from tests.harness.background import Background

CLUSTER_ID = 0xC1


def member_id(ordinal: int, generation: int = 0) -> str:
    """The member id the stand-in gives an ordinal's member (`generation`: how often it joined before)."""
    return f"{0x1000 + ordinal + 0x10000 * generation:x}"


@dataclass
class RaftEntry:
    """One member of the modelled Raft membership."""

    ordinal: int
    id: int
    learner: bool
    started: bool
    index: int  # its raft (commit = applied) index, as its Status last said

    def as_member(self, cluster: str) -> Member:
        pod = contract.pod_name(cluster, self.ordinal)
        return Member(id=self.id, name=pod if self.started else "", peer_urls=(f"http://{pod}:2380",),
                      client_urls=(f"http://{pod}:2379",) if self.started else (), is_learner=self.learner)


@dataclass
class PodSidecar:
    """What one pod's sidecar remembers: the owners it read at start, what it last wrote, whether it left."""

    ordinal: int
    name: str
    workload: dict[str, Any] | None
    body: dict[str, Any]  # the pod as last seen
    stopped: bool = False  # its preStop ran
    left: bool = False
    written: Heartbeat | None = None
    written_at: float | None = None
    label: str | None = None


class Sidecars(Background):
    """The sidecars of one cluster's kwok pods, ticking every `interval` seconds in a thread."""

    def __init__(self, api_client: client.ApiClient, namespace: str, cluster: str, leader: int | None = 0,
                 interval: float = 0.3) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.leases = client.CoordinationV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.namespace = namespace
        self.cluster = cluster
        self.interval = interval
        self.wanted_leader = leader
        self.refusing: set[int] = set()  # ordinals whose member's removal (leave or clean) is refused
        self.raft: dict[int, RaftEntry] = {}  # the modelled membership, by ordinal
        self.leaders_seen: list[int] = []
        self.errors: list[str] = []
        self.actual_leader: int | None = None
        self.term = 1
        self.index = 1
        self.generations: dict[int, int] = {}
        self.pods: dict[str, PodSidecar] = {}  # by pod uid
        self.absent_since: dict[int, float] = {}  # the leader's membership-clean clock
        self.published: RaftMembership | None = None
        self.published_at: float | None = None
        self.lease_seconds = 30  # the sidecars' Lease duration, from the cluster object once read
        self.longest_outage = 0.0  # seconds between two good ticks
        self.last_good = time.monotonic()  # the last good tick (the start counts as one)
        super().__init__()

    @property
    def leader(self) -> int | None:
        return self.actual_leader

    @leader.setter
    def leader(self, ordinal: int) -> None:
        self.wanted_leader = ordinal  # a MoveLeader, as soon as that ordinal is a running voter

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        # A stand-in that stopped writing would make Leases go stale that real sidecars keep fresh.
        # An outage still running at exit counts too: it ends nowhere else.
        self.longest_outage = max(self.longest_outage, time.monotonic() - self.last_good)
        assert self.longest_outage < self.lease_seconds, \
            f"the stand-in wrote nothing for {self.longest_outage:.1f}s: {self.errors[-3:]}"

    def _run(self) -> None:
        self.last_good = time.monotonic()
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception as error:  # noqa: BLE001 - recorded, asserted on exit, retried
                self.errors.append(repr(error))
                continue
            now = time.monotonic()
            self.longest_outage, self.last_good = max(self.longest_outage, now - self.last_good), now

    # --- what the sidecars read ---

    def _first_found(self, kinds: Iterable[tuple[str, str, str]]) -> tuple[int, dict[str, Any]] | None:
        """The first of `kinds` (group, version, plural) that has an object named after the cluster, by position."""
        for position, (group, version, plural) in enumerate(kinds):
            try:
                return position, self.custom.get_namespaced_custom_object(
                    group, version, self.namespace, plural, self.cluster)
            except ApiException as error:
                if error.status != 404:
                    raise
        return None

    def _cluster_object(self) -> tuple[Engine, dict[str, Any]] | None:
        kinds = list(engines.ENGINES.values())
        found = self._first_found((contract.GROUP, contract.VERSION, e.plural) for e in kinds)
        return (kinds[found[0]], found[1]) if found else None

    def _workload(self) -> tuple[Backend, dict[str, Any]] | None:
        kinds = list(BACKENDS.values())
        found = self._first_found((b.group, b.version, b.plural) for b in kinds)
        return (kinds[found[0]], found[1]) if found else None

    # --- one round of every sidecar ---

    def tick(self) -> None:
        found = self._cluster_object()
        if found is None:
            return
        engine, cluster_obj = found
        sidecar_spec = (cluster_obj.get("spec") or {}).get("sidecar") or {}
        refresh = float(sidecar_spec.get("heartbeatIntervalSeconds", 10))
        grace = float(sidecar_spec.get("cleanGracePeriodSeconds", 300))
        workload_found = self._workload()
        backend, workload = workload_found if workload_found else (None, None)
        kept = backend.kept(workload) if backend and workload else []
        now = time.monotonic()

        listed = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{contract.LABEL_INSTANCE}={self.cluster}").items
        present: dict[str, PodSidecar] = {}
        for pod in listed:
            uid = pod.metadata.uid
            body = self.api_client.sanitize_for_serialization(pod)
            if uid not in self.pods:
                if pod.status.phase != "Running":
                    continue
                self.pods[uid] = PodSidecar(contract.ordinal_of(pod.metadata.name), pod.metadata.name, workload, body)
            sidecar = self.pods[uid]
            sidecar.body = body
            present[uid] = sidecar
        # preStop: once per pod, when it is seen terminating or gone. A store keeps running while its
        # pod's hook runs, so the hooks seen starting in one tick run side by side: each sees the others answer.
        stopping = [s for uid, s in self.pods.items() if not s.stopped and (
            uid not in present or s.body["metadata"].get("deletionTimestamp") is not None)]
        still_up = {s.ordinal for s in self.pods.values() if not s.stopped}
        for sidecar in stopping:
            sidecar.stopped = True
            self._pre_stop(sidecar, engine, backend, workload, kept, still_up)
        for uid in [u for u in self.pods if u not in present]:
            del self.pods[uid]
        running = {s.ordinal for s in self.pods.values() if not s.stopped}
        answering = running | {s.ordinal for s in self.pods.values() if not s.left}

        self.index += 1
        for entry in self.raft.values():
            if entry.ordinal in answering:
                entry.index = self.index
        self._form_or_join(engine, kept, running, answering)
        self._elect(answering)
        if self.actual_leader is not None and (not self.leaders_seen or self.leaders_seen[-1] != self.actual_leader):
            self.leaders_seen.append(self.actual_leader)
        if self.actual_leader is not None and workload is not None \
                and not (workload["metadata"].get("deletionTimestamp")):
            self._clean(kept, answering, {contract.ordinal_of(p.metadata.name) for p in listed}, now, grace)

        lease_seconds = self.lease_seconds = max(1, round(3 * refresh))  # the sidecar's lease_duration
        for sidecar in self.pods.values():
            if not sidecar.left:
                self._heartbeat(sidecar, engine, answering, now, refresh, lease_seconds)
        self._publish(answering, now, refresh, lease_seconds)

    def _leader_id(self, answering: set[int]) -> int:
        leader = self.actual_leader
        return self.raft[leader].id if leader is not None and leader in self.raft and leader in answering else 0

    def _statuses(self, answering: set[int]) -> dict[int, Status | None]:
        leader_id = self._leader_id(answering)
        return {e.id: self._status(e, leader_id) if e.ordinal in answering else None for e in self.raft.values()}

    def _status(self, entry: RaftEntry, leader_id: int) -> Status:
        return Status(endpoint=f"http://{contract.pod_name(self.cluster, entry.ordinal)}:2379", member_id=entry.id,
                      cluster_id=CLUSTER_ID, leader=leader_id, raft_term=self.term, raft_index=entry.index,
                      raft_applied_index=entry.index, is_learner=entry.learner, errors=(), version="", db_size=0)

    def _members(self) -> list[Member]:
        return [e.as_member(self.cluster) for e in self.raft.values()]

    def _ordinal_of(self) -> dict[int, int | None]:
        return {e.id: e.ordinal for e in self.raft.values()}

    def _pre_stop(self, sidecar: PodSidecar, engine: Engine, backend: Backend | None,
                  workload: dict[str, Any] | None, kept: list[int], answering: set[int]) -> None:
        """The sidecar's leave (raftset.sidecar.shells.leave): hand off if leading, remove itself if scaled away.

        `answering`: the ordinals whose stores run while this hook runs (its own among them)."""
        own = self.raft.get(sidecar.ordinal)
        if own is None or backend is None:
            return  # this sidecar never had a member (or could not read its workload: the leave errs)
        fate = leave.fate(sidecar.ordinal, backend, workload, sidecar.body)
        decision = leave.decide(fate, own.id, self._members(), self._statuses(answering), self._ordinal_of(), kept,
                                hand_off=engine.capabilities.hand_off)
        if decision.move_leader_to is not None:
            self._lead(self._ordinal_of()[decision.move_leader_to])
        if decision.remove and sidecar.ordinal not in self.refusing:
            del self.raft[sidecar.ordinal]
            sidecar.left = True
            self._delete(contract.lease_name(sidecar.name))

    def _form_or_join(self, engine: Engine, kept: list[int], running: set[int], answering: set[int]) -> None:
        if not self.raft:
            initial = [o for o in kept if o in running]
            if not kept or len(initial) < quorum(len(kept)):
                return
            founders = initial[:1] if engine.capabilities.bootstrap_alone else kept
            for ordinal in founders:
                self._add(ordinal, learner=False, started=True)
            return
        if self._leader_id(answering) == 0:
            return  # MemberAdd and MemberPromote need a leader
        for entry in sorted(self.raft.values(), key=lambda e: e.ordinal):
            if entry.learner and entry.ordinal in running:
                if not entry.started:
                    entry.started = True  # its store started
                else:
                    entry.learner = False  # caught up: promoted
                return  # one membership change at a time
        if any(e.learner for e in self.raft.values()):
            return
        joining = sorted(o for o in running if o not in self.raft)
        if joining:
            self._add(joining[0], learner=True, started=False)

    def _add(self, ordinal: int, *, learner: bool, started: bool) -> None:
        generation = self.generations.get(ordinal, -1) + 1
        self.generations[ordinal] = generation
        self.raft[ordinal] = RaftEntry(ordinal, int(member_id(ordinal, generation), 16), learner, started, self.index)

    def _elect(self, answering: set[int]) -> None:
        voters = {o for o, e in self.raft.items() if not e.learner and e.started}
        has_quorum = bool(voters) and len(voters & answering) >= quorum(len(voters))
        leader = self.actual_leader
        if leader is not None and (leader not in voters or leader not in answering or not has_quorum):
            self.actual_leader = None  # it stopped without a hand-off, or lost quorum: an election follows
            return
        wanted = self.wanted_leader
        if wanted is not None and wanted in voters & answering and has_quorum:
            self._lead(wanted)
            self.wanted_leader = None
        elif leader is None and has_quorum:
            self._lead(min(voters & answering))

    def _lead(self, ordinal: int) -> None:
        if ordinal != self.actual_leader:
            self.actual_leader = ordinal
            self.term += 1

    def _clean(self, kept: list[int], answering: set[int], podded: set[int], now: float, grace: float) -> None:
        """The leader's membership-clean (raftset.sidecar.shells.clean), one removal per round; `podded`:
        the ordinals that have a pod."""
        members = self._members()
        answering_ids = frozenset(e.id for e in self.raft.values() if e.ordinal in answering)
        gone = frozenset(e.id for e in self.raft.values() if e.ordinal not in podded)
        self.absent_since = clean.absences(self.absent_since, members, answering_ids, now)
        decision = clean.decide(leading=True, members=members, ordinal_of=self._ordinal_of(), kept=kept,
                                absent_since=self.absent_since, answering=answering_ids, now=now, grace=grace,
                                gone=gone)
        victim = self._ordinal_of().get(decision.remove) if decision.remove is not None else None
        if victim is not None and victim not in self.refusing:
            del self.raft[victim]
            self.absent_since.pop(decision.remove, None)  # type: ignore[arg-type]

    def _heartbeat(self, sidecar: PodSidecar, engine: Engine, answering: set[int], now: float, refresh: float,
                   lease_seconds: int) -> None:
        """The sidecar's publisher (raftset.sidecar.shells.heartbeat): the Lease on change plus the refresh, the role label."""
        entry = self.raft.get(sidecar.ordinal)
        leader_id = self._leader_id(answering)
        status = self._status(entry, leader_id) if entry is not None and entry.started else None
        # A read commits in this model whenever the member sees a leader (the leader has quorum here).
        beat = heartbeat.beat(sidecar.name, status, datetime.now(timezone.utc),
                              serving=readiness.readiness("started", status, None))
        if heartbeat.should_write(sidecar.written, beat, sidecar.written_at, now, refresh):
            self._apply(heartbeat.lease_body(
                sidecar.name, self.namespace, self.cluster, beat, duration=lease_seconds,
                owner=heartbeat.owner_reference(sidecar.workload),
                extra_labels={contract.LABEL_ENGINE: engine.name}))
            sidecar.written, sidecar.written_at = beat, now
        if sidecar.label != beat.role:
            try:
                self.core.patch_namespaced_pod(sidecar.name, self.namespace,
                                               {"metadata": {"labels": {contract.LABEL_ROLE: beat.role}}})
            except ApiException as error:
                if error.status != 404:
                    raise
            sidecar.label = beat.role

    def _publish(self, answering: set[int], now: float, refresh: float, lease_seconds: int) -> None:
        """The leader's membership publisher (raftset.sidecar.shells.membership)."""
        leader = self.actual_leader
        writer = next((s for s in self.pods.values() if s.ordinal == leader and not s.left), None)
        if leader is None or writer is None:
            self.published = self.published_at = None  # leading again later publishes at once
            return
        members = self._members()
        statuses = self._statuses(answering)
        leader_status = statuses[self.raft[leader].id]
        assert leader_status is not None
        record = membership.record(leader_status, writer.name, members, statuses, self._ordinal_of(),
                                   datetime.now(timezone.utc))
        if not membership.should_publish(self.published, record, self.published_at, now, refresh):
            return
        self._apply(membership.lease_body(self.cluster, self.namespace, record, duration=lease_seconds,
                                          owner=heartbeat.cluster_owner(writer.workload)))
        self.published, self.published_at = record, now

    def _apply(self, body: dict[str, Any]) -> None:
        # Server-side apply, as the sidecar writes it (a Lease update needs a resourceVersion).
        self.leases.patch_namespaced_lease(
            body["metadata"]["name"], self.namespace, body, field_manager="raftset-sidecar", force=True,
            _content_type="application/apply-patch+yaml")

    def _delete(self, name: str) -> None:
        try:
            self.leases.delete_namespaced_lease(name, self.namespace)
        except ApiException as error:
            if error.status != 404:
                raise

