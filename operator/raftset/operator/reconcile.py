"""One round of one cluster's reconcile, as a named, ordered list of stages over one `Observed` value.

observe -> plan -> components -> narrate -> publish:

* observe: everything the round reads from the Lease book, kopf's indices and the cluster object, in one value;
* plan: the spec parsed, the workload read, the pure planner's next scale step or roll restart;
* components: the registry walked (raftset.operator.components.registry), every write of the round;
* narrate: what is told before the status (replace steps, the step's Events, a missing member's cause);
* publish: the status computed, its changes announced, the patch.

Every round recomputes the next scale step from the cluster object, the workload object (with the
scale step it records), the membership Lease and the heartbeat Leases, so an operator restarted in
the middle of a scale picks up exactly where the API says it is. What is kept in memory (indices,
locks, the time of the last full apply) is a cache that a restart simply rebuilds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import kopf

from raftset import contract
from raftset.membership import RaftMembership, parse_membership
from raftset.operator import watches
from raftset.operator.alarms import ClusterAlarm
from raftset.operator.components import narration
from raftset.operator.components.diagnosis import find_cause
from raftset.operator.components.protocol import Problem, Round
from raftset.operator.components.registry import COMPONENTS, walk
from raftset.operator.io import apiorder
from raftset.operator.io.kube import KubeClient
from raftset.operator.metrics import RESULT_ERROR, RESULT_FAILED, RESULT_INVALID, RESULT_OK, OperatorMetrics
from raftset.operator.pure import lasting, planner, replace, rolls, spec, status, wakeup
from raftset.operator.pure.diagnosis import Diagnosed, look_again
from raftset.operator.pure.events import Condition, Event
from raftset.operator.pure.heartbeats import HeartbeatRecord, from_observed
from raftset.operator.pure.scale_step import SCALE_IN, ScaleStep, parse_step
from raftset.operator.pure.settings import OperatorSettings
from raftset.operator.pure.books import Change
from raftset.operator.pure.leasebook import LeaseBook
from raftset.operator.pure.podbook import PodBook
from raftset.operator.pure.workloadbook import WorkloadBook
from raftset.operator.staleness import Staleness
from raftset.workloads import ADVANCED_STATEFULSET, STATEFULSET, Backend

Key = tuple[str, str]  # (namespace, cluster name)


@dataclass
class Runtime:
    """Per-process caches; none of it is needed to resume after a restart."""

    settings: OperatorSettings
    kube: KubeClient
    watches: watches.Watches  # what this operator watches (decided at start)
    turns: dict[Key, apiorder.Turns] = field(default_factory=dict)
    applied_at: dict[Key, float] = field(default_factory=dict)
    # What the last writing round applied, per cluster and object (Round.applied): a spec change then
    # applies only the objects it changes. Cleared with applied_at, which makes the next round apply all.
    applied: dict[Key, dict[str, str]] = field(default_factory=dict)
    # The last status computed per cluster: a reconcile may run on a body that does not
    # show our previous status patch yet, and must not announce the same change twice.
    published: dict[Key, dict[str, Any]] = field(default_factory=dict)
    # The clusters' Leases as last heard, each heartbeat with when it was last seen to change
    # (raftset.operator.pure.leasebook, .freshness); a restart starts afresh, every Lease
    # unconfirmed until its next renewal.
    leases: LeaseBook = field(default_factory=LeaseBook)
    # The member pods' scale-away marks and replacement requests, and each backend's workloads
    # (raftset.operator.pure.podbook, .workloadbook), kept by the same watches (io.objectwatch).
    pods: PodBook = field(default_factory=PodBook)
    workloads: dict[str, WorkloadBook] = field(
        default_factory=lambda: {backend.name: WorkloadBook() for backend in (STATEFULSET, ADVANCED_STATEFULSET)})
    # Set once every watch's first list is in: a round on an empty book would see every member missing.
    listed: asyncio.Event = field(default_factory=asyncio.Event)
    # When each member pod (by UID) was first listed during a roll (raftset.operator.pure.rolls); a
    # restart starts afresh, and each pod must then report once more before the next deletion.
    pod_sightings: dict[Key, dict[str, rolls.PodSighting]] = field(default_factory=dict)
    # When each of a cluster's status.disagreements was first seen (raftset.operator.pure.lasting).
    disagreements: dict[Key, dict[str, lasting.Seen]] = field(default_factory=dict)
    # The last look for why a cluster's members are missing (raftset.operator.pure.diagnosis).
    diagnosed: dict[Key, Diagnosed] = field(default_factory=dict)
    # Each cluster's alarm (raftset.operator.alarms).
    alarms: dict[Key, ClusterAlarm] = field(default_factory=dict)
    annotations_seen: dict[Key, dict[str, str]] = field(default_factory=dict)
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    # When each heartbeat Lease expires unless renewed; its task rings the cluster then.
    staleness: Staleness = field(init=False)

    def __post_init__(self) -> None:
        self.staleness = Staleness(self.ring)

    def alarm(self, key: Key) -> ClusterAlarm:
        return self.alarms.get(key) or self.alarms.setdefault(key, ClusterAlarm())

    def ring(self, key: Key) -> None:
        """Something `key` reads changed: its next round is due now, once a round has set its alarm.
        Before that the cluster's first round (kopf's create or resume handler) reads it anyway; a
        ring meanwhile would only run that round twice over, a thousand times at once in a burst."""
        alarm = self.alarms.get(key)
        if alarm is not None and alarm.wake is not None:
            alarm.ring()

    def lease_changed(self, change: Change) -> None:
        """What the Lease watch heard: the staleness timer told, then as `changed`."""
        if change.gone:
            self.staleness.gone(change.key, change.name)
        elif change.expires is not None:
            self.staleness.renewed(change.key, change.name, change.expires)
        self.changed(change)

    def changed(self, change: Change) -> None:
        """What a watch heard: a round where its book says so; after a drift, one that re-applies all."""
        if change.drift:
            self.drifted(change.key)
        if change.ring:
            self.ring(change.key)

    def drifted(self, key: Key) -> None:
        """An owned object was changed behind our back: the next round applies every object."""
        self.applied_at.pop(key, None)
        self.applied.pop(key, None)

    def forget(self, key: Key) -> None:
        self.staleness.gone(key)
        self.leases.forget(key)
        self.pods.forget(key)
        for workloads in self.workloads.values():
            workloads.forget(key)
        self.alarms.pop(key, None)
        self.annotations_seen.pop(key, None)
        self.pod_sightings.pop(key, None)
        self.turns.pop(key, None)
        self.drifted(key)
        self.published.pop(key, None)
        self.disagreements.pop(key, None)
        self.diagnosed.pop(key, None)
        self.metrics.clusters.forget(key)


@dataclass(frozen=True)
class Indices:
    """What a reconcile reads of the API objects, by what they hold: the books the operator's own
    watches keep (raftset.operator.io.objectwatch)."""

    heartbeats: Mapping[Key, Any]
    memberships: Mapping[Key, Any]
    scale_away_marks: Mapping[Key, Any]
    replace_requests: Mapping[Key, Any]  # pods with a replace request or record: {pod, requested, progress}
    unready_pods: Mapping[Key, Any]  # placed pods not Ready, or in a node loss (raftset.operator.pure.nodeloss)
    workloads: dict[str, Mapping[Key, Any]]  # by Backend.name
    backup_records: Mapping[Key, Any]  # the backup Lease's annotations (raftset.operator.pure.backup_status)

    def workload(self, backend: Backend, key: Key) -> dict[str, Any] | None:
        return next(iter(self.workloads[backend.name].get(key, [])), None)

    @classmethod
    def of(cls, runtime: Runtime) -> Indices:
        """What the runtime's books hold (a resource not watched here reads as empty, and the reconcile
        refuses a cluster that needs it before reading any: watches.problem)."""
        heartbeats, memberships, backups = runtime.leases.views()
        marks, replacements, unready = runtime.pods.views()
        return cls(heartbeats, memberships, marks, replacements, unready,
                   {name: book.view() for name, book in runtime.workloads.items()}, backups)


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Observed:
    """Everything one round reads before it decides: the cluster object and what kopf's indices hold for it."""

    key: Key
    body: kopf.Body
    indices: Indices  # for the workload, whose kind the spec names
    generation: int
    old_status: dict[str, Any]  # as the body shows it
    previous: Mapping[str, Any]  # the status last computed: the body may not show our last patch yet
    heartbeats: list[HeartbeatRecord]
    raft: RaftMembership | None
    backup: Mapping[str, Any] | None  # the backup Lease's annotations
    replace_requests: list[Mapping[str, Any]]
    marked_pods: tuple[str, ...]
    unready_pods: tuple[str, ...]
    now: datetime
    forced: bool  # a change event, not a timer: write whatever the pacing says

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))


def observe(runtime: Runtime, body: kopf.Body, indices: Indices, *, forced: bool) -> Observed:
    key = (body.metadata.namespace, body.metadata.name)
    old_status = dict(body.get("status") or {})
    return Observed(
        key=key, body=body, indices=indices, generation=int(body.metadata.get("generation") or 0),
        old_status=old_status, previous=runtime.published.get(key, old_status),
        heartbeats=from_observed(indices.heartbeats.get(key, []), body.metadata.name),
        raft=parse_membership(next(iter(indices.memberships.get(key, [])), None)),
        backup=next(iter(indices.backup_records.get(key, [])), None),
        replace_requests=list(indices.replace_requests.get(key, [])),
        marked_pods=tuple(indices.scale_away_marks.get(key, [])),
        unready_pods=tuple(indices.unready_pods.get(key, [])), now=_now(), forced=forced)


@dataclass
class Outcome:
    """What the stages have decided so far; `publish` turns it into the status."""

    cluster: spec.Cluster | None = None
    plan: planner.Plan | None = None
    workload: dict[str, Any] | None = None
    problem: Problem | None = None
    result: str = RESULT_OK
    ended: bool = False  # an early stage refused the round: only narrate and publish still run
    stepping: bool = False  # the plan takes a scale step or a roll restart
    round: Round | None = None  # what the components found and wrote
    narrated: list[dict[str, Any]] = field(default_factory=list)
    conditions: tuple[Condition, ...] = ()
    status: dict[str, Any] = field(default_factory=dict)
    patch_status: bool = False

    def end(self, problem: Problem, result: str, cluster: spec.Cluster | None = None) -> Outcome:
        return dataclasses.replace(self, cluster=cluster, problem=problem, result=result, ended=True)


async def reconcile(body: kopf.Body, patch: kopf.Patch, runtime: Runtime, indices: Indices, *,
                    forced: bool, urgency: int = apiorder.BACKGROUND) -> None:
    """One cluster's round, its API calls in the order of `urgency` (`raftset.operator.io.apiorder`)."""
    key = (body.metadata.namespace, body.metadata.name)
    kind = str(body.get("kind", ""))
    seen_generation = (body.get("status") or {}).get("observedGeneration")
    await runtime.listed.wait()  # a round on a book still empty would see every member missing
    turns = runtime.turns.get(key) or runtime.turns.setdefault(key, apiorder.Turns(runtime.kube.gate))
    async with turns.take(apiorder.urgency_of(urgency, int(body.metadata.get("generation") or 0),
                                              seen_generation if isinstance(seen_generation, int) else None)):
        started = time.perf_counter()
        result = RESULT_ERROR
        # A round that fails is tried again at the old timer's pace, or sooner on an event.
        wake = wakeup.Wake(_now() + timedelta(seconds=runtime.settings.reconcile_interval))
        try:
            result, wake = await _reconcile(runtime, body, patch, indices, forced=forced)
            runtime.metrics.cluster_reconciles.labels(*key, kind).inc()
        finally:
            runtime.alarm(key).set(wake)
            runtime.metrics.reconciles.labels(kind, result).inc()
            runtime.metrics.duration.labels(kind).observe(time.perf_counter() - started)


Stage = Callable[[Runtime, Observed, Outcome], Awaitable[Outcome]]


async def _reconcile(runtime: Runtime, body: kopf.Body, patch: kopf.Patch, indices: Indices, *,
                     forced: bool) -> tuple[str, wakeup.Wake]:
    """The stages in order; returns the round's result for the metrics (RESULT_*) and its next wake-up."""
    observed = observe(runtime, body, indices, forced=forced)
    outcome = Outcome()
    for name, stage in STAGES:
        if outcome.ended and name not in ALWAYS:
            continue
        outcome = await stage(runtime, observed, outcome)
    if outcome.round is not None:
        for annotation in outcome.round.dropped_annotations:
            patch.metadata.annotations[annotation] = None
    if outcome.patch_status:
        patch.status.update(outcome.status)
    return outcome.result, next_wake(runtime, observed, outcome)


def next_wake(runtime: Runtime, observed: Observed, outcome: Outcome) -> wakeup.Wake:
    """When this cluster's next round is due if no event comes first: the moments its decisions turn
    on time (raftset.operator.pure.wakeup), the full re-apply, and the recheck while in motion."""
    settings, key, now = runtime.settings, observed.key, observed.now
    shown = outcome.status if outcome.patch_status else observed.old_status
    applied = runtime.applied_at.get(key)
    resync_at = ((datetime.fromtimestamp(applied, timezone.utc) if applied else now)
                 + timedelta(seconds=settings.resync_period(status.degraded(shown))))
    resting = (not outcome.ended and outcome.plan is not None and wakeup.at_rest(outcome.plan.action, outcome.status)
               and not (outcome.workload is not None and rolls.pending(outcome.workload)))
    diagnosed = runtime.diagnosed.get(key)
    grace = timedelta(seconds=settings.stuck_seconds)
    due = (wakeup.stuck_at(_recorded(outcome.workload), settings.stuck_seconds),
           wakeup.lasting_at(runtime.disagreements.get(key, {}), grace),
           wakeup.refresh_at(shown, outcome.status, settings.status_refresh_seconds),
           diagnosed.at + timedelta(seconds=settings.diagnosis_seconds) if diagnosed else None,
           outcome.round.due if outcome.round is not None else None)
    return wakeup.next_wake(now, recheck_seconds=settings.reconcile_interval, resting=resting,
                            resync_at=resync_at, due=due)


async def plan(runtime: Runtime, observed: Observed, outcome: Outcome) -> Outcome:
    """The spec parsed and served, the workload read, the next scale step or roll restart planned."""
    try:
        cluster = spec.parse(observed.body, default_workload_kind=runtime.settings.default_workload_kind,
                             sidecar_image=runtime.settings.sidecar_image)
    except spec.InvalidSpec as error:
        return outcome.end((error.reason, str(error)), RESULT_INVALID)
    unserved = watches.problem(cluster.backend.name, runtime.watches)
    if unserved is not None:
        return outcome.end(unserved, RESULT_FAILED, cluster)
    backend = cluster.backend
    cached = observed.indices.workload(backend, observed.key)
    if cached is None and not await runtime.kube.has_api(backend.api_version, backend.kind):
        return outcome.end((
            "WorkloadAPIMissing",
            f"workloadKind {backend.name} needs {backend.kind}.{backend.group}/{backend.version}, "
            f"which this cluster does not serve: install OpenKruise or use workloadKind StatefulSet"),
            RESULT_FAILED, cluster)

    async def read_workload() -> dict[str, Any] | None:
        return await runtime.kube.get(backend.api_version, backend.kind, cluster.namespace, cluster.name)

    workload = cached if cached is not None else await read_workload()
    planned = await _next_move(runtime, observed, cluster, workload)
    if cached is not None and planned.action in planner.STEP_REASONS:
        # The index may trail our own last write by a watch event; a scale step is planned on
        # what the apiserver says now, so that no scale step is taken twice.
        workload = await read_workload()
        planned = await _next_move(runtime, observed, cluster, workload)
    if planned.action == SCALE_IN:
        # The quorum guard's evidence, read at this moment: a heartbeat stays fresh for a while
        # after a drain evicted its pod.
        listed = await runtime.kube.list("v1", "Pod", cluster.namespace, contract.label_selector(cluster.name))
        planned = await _next_move(runtime, observed, cluster, workload,
                                   serving=planner.serving_ordinals(listed, cluster.name))
    return dataclasses.replace(outcome, cluster=cluster, plan=planned, workload=workload,
                               stepping=planned.action in planner.STEP_REASONS)


def _recorded(workload: Mapping[str, Any] | None) -> ScaleStep | None:
    annotations = ((workload or {}).get("metadata") or {}).get("annotations") or {}
    return parse_step(annotations.get(contract.ANNOTATION_SCALE_STEP))


async def _next_move(runtime: Runtime, observed: Observed, cluster: spec.Cluster,
                     workload: dict[str, Any] | None, *, serving: frozenset[int] | None = None) -> planner.Plan:
    """The planner's plan; on a steady cluster whose pods run an older template, the roll's next restart."""
    backend, now, heartbeats = cluster.backend, observed.now, observed.heartbeats
    current = backend.scale(workload) if workload is not None else None
    hand_off = cluster.engine.capabilities.hand_off
    plan = planner.plan(cluster.name, backend, cluster.replicas, current, heartbeats, observed.raft, now,
                        pending=_recorded(workload), stuck_after=runtime.settings.stuck_seconds,
                        hand_off=hand_off, serving=serving)
    if plan.action != "steady" or workload is None or not rolls.pending(workload):
        return plan
    # Some pods run an older template: only now is the pod list worth a request.
    listed = await runtime.kube.list("v1", "Pod", cluster.namespace, contract.label_selector(cluster.name))
    pods = rolls.pod_revisions(listed, cluster.name)
    key = observed.key
    seen = runtime.pod_sightings[key] = rolls.sight(runtime.pod_sightings.get(key, {}), pods, now)
    revision = rolls.update_revision(workload)
    assert revision is not None  # rolls.pending checked it
    move = rolls.next_restart(plan, revision, pods, heartbeats, now, seen=seen,
                              settle=timedelta(seconds=cluster.sidecar.heartbeat_interval), hand_off=hand_off,
                              raft=observed.raft)
    return rolls.overdue(move, seen, now, runtime.settings.stuck_seconds)


async def components(runtime: Runtime, observed: Observed, outcome: Outcome) -> Outcome:
    """Whether the round writes (the pacing), then the registry walked in order (registry.walk)."""
    assert outcome.cluster is not None and outcome.plan is not None
    key, now = observed.key, observed.now
    # Raft confirmed the recorded scale step: dropping the record also relaxes the PDB to the new size.
    confirmed = outcome.plan.record is None and _recorded(outcome.workload) is not None
    degraded, since_applied = status.degraded(observed.old_status), now.timestamp() - runtime.applied_at.get(key, 0.0)
    resync = runtime.settings.resync_due(degraded=degraded, since_applied=since_applied)
    write = runtime.settings.write_due(stepping=outcome.stepping, forced=observed.forced or confirmed,
                                       degraded=degraded, since_applied=since_applied)
    current = Round(cluster=outcome.cluster, plan=outcome.plan, workload=outcome.workload, now=now, write=write,
                    raft=observed.raft, marked_pods=observed.marked_pods, unready_pods=observed.unready_pods,
                    body=observed.body, heartbeats=observed.heartbeats, previous=observed.previous,
                    applied={} if resync else runtime.applied.get(key, {}))
    current, failed = await walk(runtime.kube, current)
    if failed:
        runtime.applied.pop(key, None)  # what the failed walk left is unknown: the next write applies all
    elif write:
        runtime.applied_at[key] = now.timestamp()
        runtime.applied[key] = dict(current.applying)
    # The scale-in guard may have held the step on what it read after the budget changed.
    return dataclasses.replace(outcome, round=current, workload=current.workload, problem=current.problem,
                               conditions=current.conditions, plan=current.plan,
                               stepping=outcome.stepping and current.plan.action in planner.STEP_REASONS)


async def narrate(runtime: Runtime, observed: Observed, outcome: Outcome) -> Outcome:
    """What is told before the status: the replace steps (named Events, awaited), the scale step's
    Events, the components' Events, and the cause of a missing member."""
    body, now = observed.body, observed.now
    # Told before the status that counts them is published (raftset.operator.pure.narration).
    narrated = await narration.tell_replace_steps(runtime.kube, body, observed.replace_requests,
                                                 observed.previous.get("narrated") or [], now)
    outcome = dataclasses.replace(outcome, narrated=narrated)
    if outcome.ended:
        return outcome
    assert outcome.cluster is not None and outcome.plan is not None and outcome.round is not None
    problem = outcome.problem
    told: list[Event] = []
    if outcome.stepping and problem is None:
        runtime.metrics.scale_steps.labels(outcome.cluster.engine.kind, outcome.plan.action).inc()
        told += outcome.plan.step_events()
    told += outcome.round.events
    for event in told:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
    if problem is None and not outcome.stepping:
        # A member that has not joined: name the real cause where one can be named.
        missing = planner.membership(outcome.plan.kept, observed.heartbeats, now).missing
        problem = await _cause(runtime, outcome.cluster, missing, observed.heartbeats, now, forced=observed.forced)
    problem = problem or outcome.round.late_problem
    return dataclasses.replace(outcome, problem=problem, result=RESULT_OK if problem is None else RESULT_FAILED)


async def publish(runtime: Runtime, observed: Observed, outcome: Outcome) -> Outcome:
    """The status computed from the outcome, its changes announced once, the patch decided."""
    key, kind, now = observed.key, observed.kind, observed.now
    new = status.status(outcome.cluster, outcome.plan, outcome.workload, observed.heartbeats, observed.old_status,
                        observed.generation, now, outcome.problem, raft=observed.raft, extra=outcome.conditions,
                        backup=observed.backup, replacements=replace.rows(observed.replace_requests))
    if outcome.narrated:
        new["narrated"] = outcome.narrated
    announced = status.announcements(observed.previous, new)
    seen, lasted = lasting.track(runtime.disagreements.get(key, {}), new.get("disagreements") or [], now,
                                 timedelta(seconds=runtime.settings.stuck_seconds))
    runtime.disagreements[key] = seen
    announced += [lasting.event(text, now - seen[text].since) for text in lasted]
    for event in announced:
        kopf.event(observed.body, type=event.type, reason=event.reason, message=event.message)
    runtime.metrics.announced(key, kind, announced)
    runtime.metrics.clusters.observe(key, kind, new)
    runtime.published[key] = new
    due = status.patch_due(observed.old_status, new, now, runtime.settings.status_refresh_seconds)
    return dataclasses.replace(outcome, status=new, patch_status=due)


STAGES: tuple[tuple[str, Stage], ...] = (
    ("plan", plan),
    ("components", components),
    ("narrate", narrate),
    ("publish", publish),
)
ALWAYS = frozenset({"narrate", "publish"})  # they run after a stage ended the round too


async def _cause(runtime: Runtime, cluster: spec.Cluster, missing: tuple[int, ...],
                 heartbeats: list[HeartbeatRecord], now: datetime, *, forced: bool) -> Problem | None:
    """Why members are missing, looked for again only when diagnosis.look_again says so."""
    key = (cluster.namespace, cluster.name)
    if not missing:
        runtime.diagnosed.pop(key, None)
        return None
    last = runtime.diagnosed.get(key)
    every = timedelta(seconds=runtime.settings.diagnosis_seconds)
    if last is not None and not look_again(last, missing, now, every, forced=forced):
        return last.cause
    cause = await find_cause(runtime.kube, cluster, missing, heartbeats, now)
    runtime.diagnosed[key] = Diagnosed(tuple(missing), now, cause)
    return cause


async def release(runtime: Runtime, namespace: str, name: str) -> None:
    """The cluster object is being deleted: what garbage collection leaves behind goes now."""
    for component in COMPONENTS:
        await component.release(runtime.kube, namespace, name)
    runtime.forget((namespace, name))
