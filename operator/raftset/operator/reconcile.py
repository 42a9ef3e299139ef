"""One reconcile of one cluster: read the API, call the pure core, walk the components, publish status.

Every reconcile recomputes the next step from the cluster object, the workload object
(with the step it records), the membership Lease and the heartbeat Leases, so an
operator restarted in the middle of a scale picks up exactly where the API says it is. What is kept in memory (indices, locks, the time of
the last full apply) is a cache that a restart simply rebuilds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from raftset import contract
from raftset.membership import ScaleStep, parse_membership, parse_step
from raftset.operator import (apiorder, backup_requests, diagnosis, lasting, narration, planner, recovery_shell,
                              replacements, rolls, spec, status, watches)
from raftset.operator.components import COMPONENTS, Step
from raftset.operator.kube import Kube, api_error_message
from raftset.operator.freshness import Sighting
from raftset.operator.heartbeats import HeartbeatRecord, from_observed
from raftset.operator.metrics import (RESULT_ERROR, RESULT_FAILED, RESULT_INVALID, RESULT_OK,
                                      OperatorMetrics)
from raftset.operator.settings import Settings
from raftset.workloads import ADVANCED_STATEFULSET, STATEFULSET, Backend

Key = tuple[str, str]  # (namespace, cluster name)


@dataclass
class Runtime:
    """Per-process caches; none of it is needed to resume after a restart."""

    settings: Settings
    kube: Kube
    watches: watches.Watches  # what this operator watches (decided at start)
    turns: dict[Key, apiorder.Turns] = field(default_factory=dict)
    applied_at: dict[Key, float] = field(default_factory=dict)
    # The last status computed per cluster: a reconcile may run on a body that does not
    # show our previous status patch yet, and must not announce the same change twice.
    published: dict[Key, dict[str, Any]] = field(default_factory=dict)
    # When each heartbeat Lease was last seen to change (raftset.operator.freshness); a
    # restart starts afresh, every Lease unconfirmed until its next renewal.
    sightings: dict[Key, dict[str, Sighting]] = field(default_factory=dict)
    # When each member pod (by UID) was first listed during a roll (raftset.operator.rolls); a
    # restart starts afresh, and each pod must then report once more before the next deletion.
    pod_sightings: dict[Key, dict[str, rolls.PodSighting]] = field(default_factory=dict)
    # When each of a cluster's status.disagreements was first seen (raftset.operator.lasting).
    disagreements: dict[Key, dict[str, lasting.Seen]] = field(default_factory=dict)
    # The last look for why a cluster's members are missing (raftset.operator.diagnosis).
    diagnosed: dict[Key, diagnosis.Diagnosed] = field(default_factory=dict)
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)

    def forget(self, key: Key) -> None:
        self.sightings.pop(key, None)
        self.pod_sightings.pop(key, None)
        self.turns.pop(key, None)
        self.applied_at.pop(key, None)
        self.published.pop(key, None)
        self.disagreements.pop(key, None)
        self.diagnosed.pop(key, None)
        self.metrics.clusters.forget(key)


@dataclass(frozen=True)
class Indices:
    """kopf's indices (kopf.Index) a reconcile reads, by what they hold."""

    heartbeats: Mapping[Key, Any]
    memberships: Mapping[Key, Any]
    scale_away_marks: Mapping[Key, Any]
    replace_requests: Mapping[Key, Any]  # pods with a replace request or record: {pod, requested, progress}
    workloads: dict[str, Mapping[Key, Any]]  # by Backend.name
    backup_records: Mapping[Key, Any]  # the backup Lease's annotations (raftset.operator.backup_status)

    def workload(self, backend: Backend, key: Key) -> dict[str, Any] | None:
        return next(iter(self.workloads[backend.name].get(key, [])), None)

    @classmethod
    def of(cls, heartbeats: kopf.Index | None, memberships: kopf.Index | None, scale_away_marks: kopf.Index | None,
           replace_requests: kopf.Index | None, statefulsets: kopf.Index | None,
           advanced_statefulsets: kopf.Index | None, backup_records: kopf.Index | None) -> Indices:
        """The indices kopf passed; one not watched here (None) reads as empty, and the reconcile
        refuses a cluster that needs it before reading any (watches.problem)."""
        workloads = {STATEFULSET.name: statefulsets, ADVANCED_STATEFULSET.name: advanced_statefulsets}
        return cls(_watched(heartbeats), _watched(memberships), _watched(scale_away_marks),
                   _watched(replace_requests), {name: _watched(index) for name, index in workloads.items()},
                   _watched(backup_records))


def _watched(index: kopf.Index | None) -> Mapping[Key, Any]:
    """kopf's live index where it is watched (an empty one included), else nothing."""
    return index if index is not None else {}


def _now() -> datetime:
    return datetime.now(timezone.utc)


async def reconcile(body: kopf.Body, patch: kopf.Patch, runtime: Runtime, indices: Indices, *,
                    forced: bool, urgency: int = apiorder.BACKGROUND) -> None:
    """One cluster's reconcile, its API calls in the order of `urgency` (`raftset.operator.apiorder`)."""
    key = (body.metadata.namespace, body.metadata.name)
    kind = str(body.get("kind", ""))
    observed = (body.get("status") or {}).get("observedGeneration")
    turns = runtime.turns.get(key) or runtime.turns.setdefault(key, apiorder.Turns(runtime.kube.gate))
    async with turns.take(apiorder.urgency_of(urgency, int(body.metadata.get("generation") or 0),
                                              observed if isinstance(observed, int) else None)):
        started = time.perf_counter()
        result = RESULT_ERROR
        try:
            result = await _reconcile(runtime, body, patch, indices, forced=forced)
            runtime.metrics.cluster_reconciles.labels(*key, kind).inc()
        finally:
            runtime.metrics.reconciles.labels(kind, result).inc()
            runtime.metrics.duration.labels(kind).observe(time.perf_counter() - started)


async def _reconcile(runtime: Runtime, body: kopf.Body, patch: kopf.Patch, indices: Indices, *,
                     forced: bool) -> str:
    """One reconcile; returns its result for the metrics (RESULT_*)."""
    now = _now()
    key = (body.metadata.namespace, body.metadata.name)
    old_status = dict(body.get("status") or {})
    generation = int(body.metadata.get("generation") or 0)
    members = from_observed(indices.heartbeats.get(key, []), body.metadata.name)
    raft = parse_membership(next(iter(indices.memberships.get(key, [])), None))
    backup = next(iter(indices.backup_records.get(key, [])), None)
    replace_entries = list(indices.replace_requests.get(key, []))
    replacing = replacements.rows(replace_entries)
    # Told before the status that counts them is published (raftset.operator.narration).
    narrated = await narration.tell_replacements(
        runtime.kube, body, replace_entries, runtime.published.get(key, old_status).get("narrated") or [], now)

    def publish(cluster: spec.Cluster | None, plan: planner.Plan | None,
                workload: dict[str, Any] | None, problem: tuple[str, str] | None,
                extra: tuple[status.Condition, ...] = ()) -> None:
        new = status.status(cluster, plan, workload, members, old_status, generation, now, problem, raft=raft,
                            extra=extra, backup=backup, replacements=replacing)
        if narrated:
            new["narrated"] = narrated
        announced = status.announcements(runtime.published.get(key, old_status), new)
        seen, lasted = lasting.track(runtime.disagreements.get(key, {}), new.get("disagreements") or [], now,
                                     timedelta(seconds=runtime.settings.stuck_seconds))
        runtime.disagreements[key] = seen
        announced += [lasting.event(text, now - seen[text].since) for text in lasted]
        for kind, reason, message in announced:
            kopf.event(body, type=kind, reason=reason, message=message)
        runtime.metrics.announced(key, str(body.get("kind", "")), announced)
        runtime.metrics.clusters.observe(key, str(body.get("kind", "")), new)
        runtime.published[key] = new
        if status.patch_due(old_status, new, now, runtime.settings.status_refresh_seconds):
            patch.status.update(new)

    try:
        cluster = spec.parse(body, default_workload_kind=runtime.settings.default_workload_kind,
                             sidecar_image=runtime.settings.sidecar_image)
    except spec.InvalidSpec as error:
        publish(None, None, None, (error.reason, str(error)))
        return RESULT_INVALID
    unserved = watches.problem(cluster.backend.name, runtime.watches)
    if unserved is not None:
        publish(cluster, None, None, unserved)
        return RESULT_FAILED
    await backup_requests.take(runtime.kube, body, cluster, patch, now)

    backend = cluster.backend
    cached = indices.workload(backend, key)
    if cached is None and not await runtime.kube.has_api(backend.api_version, backend.kind):
        publish(cluster, None, None, (
            "WorkloadAPIMissing",
            f"workloadKind {backend.name} needs {backend.kind}.{backend.group}/{backend.version}, "
            f"which this cluster does not serve: install OpenKruise or use workloadKind StatefulSet"))
        return RESULT_FAILED

    async def read_workload() -> dict[str, Any] | None:
        return await runtime.kube.get(backend.api_version, backend.kind, cluster.namespace, cluster.name)

    def recorded(workload: dict[str, Any] | None) -> ScaleStep | None:
        annotations = ((workload or {}).get("metadata") or {}).get("annotations") or {}
        return parse_step(annotations.get(contract.ANNOTATION_SCALE_STEP))

    async def next_step(workload: dict[str, Any] | None) -> planner.Plan:
        current = backend.scale(workload) if workload is not None else None
        hand_off = cluster.engine.capabilities.hand_off
        plan = planner.plan(cluster.name, backend, cluster.replicas, current, members, raft, now,
                            pending=recorded(workload), stuck_after=runtime.settings.stuck_seconds,
                            hand_off=hand_off)
        if plan.action != "steady" or workload is None or not rolls.pending(workload):
            return plan
        # Some pods run an older template: only now is the pod list worth a request.
        listed = await runtime.kube.list("v1", "Pod", cluster.namespace, contract.label_selector(cluster.name))
        pods = rolls.pod_revisions(listed, cluster.name)
        seen = runtime.pod_sightings[key] = rolls.sight(runtime.pod_sightings.get(key, {}), pods, now)
        revision = rolls.update_revision(workload)
        assert revision is not None  # rolls.pending checked it
        return rolls.next_step(plan, revision, pods, members, now, seen=seen,
                               settle=timedelta(seconds=cluster.sidecar.heartbeat_interval), hand_off=hand_off,
                               raft=raft)

    workload = cached if cached is not None else await read_workload()
    plan = await next_step(workload)
    if cached is not None and plan.action in planner.STEP_REASONS:
        # The index may trail our own last write by a watch event; a step is planned on
        # what the apiserver says now, so that no step is taken twice.
        workload = await read_workload()
        plan = await next_step(workload)

    stepping = plan.action in planner.STEP_REASONS
    # Raft confirmed the recorded step: dropping the record also relaxes the PDB to the new size.
    confirmed = plan.record is None and recorded(workload) is not None
    write = runtime.settings.write_due(stepping=stepping, forced=forced or confirmed,
                                       degraded=status.degraded(old_status),
                                       since_applied=now.timestamp() - runtime.applied_at.get(key, 0.0))
    step = Step(cluster=cluster, plan=plan, workload=workload, now=now, write=write, raft=raft,
                marked_pods=tuple(indices.scale_away_marks.get(key, [])))
    try:
        for component in COMPONENTS:
            step = await component.sync(runtime.kube, step)
        if write:
            runtime.applied_at[key] = now.timestamp()
        problem = step.problem
    except ApiException as error:
        # Announced once through the Degraded condition, not on every reconcile.
        problem = ("ApplyFailed", api_error_message(error))

    if stepping and problem is None:
        runtime.metrics.scale_steps.labels(cluster.engine.kind, plan.action).inc()
        for kind, reason, message in plan.step_events():
            kopf.event(body, type=kind, reason=reason, message=message)
    if problem is None and not stepping:
        # A member that has not joined: name the real cause where one can be named.
        missing = planner.membership(plan.kept, members, now).missing
        problem = await _cause(runtime, cluster, missing, members, now, forced=forced)
    extra: tuple[status.Condition, ...] = ()
    if step.workload is not None:
        try:
            extra = (await recovery_shell.reconcile(
                runtime.kube, body, patch, cluster, plan.kept, members, raft, step.workload,
                runtime.published.get(key, old_status), now),)
        except ApiException as error:
            problem = problem or ("QuorumRecoveryFailed", api_error_message(error))
    publish(cluster, plan, step.workload, problem, extra)
    return RESULT_OK if problem is None else RESULT_FAILED


async def _cause(runtime: Runtime, cluster: spec.Cluster, missing: tuple[int, ...],
                 members: list[HeartbeatRecord], now: datetime, *, forced: bool) -> tuple[str, str] | None:
    """Why members are missing, looked for again only when diagnosis.look_again says so."""
    key = (cluster.namespace, cluster.name)
    if not missing:
        runtime.diagnosed.pop(key, None)
        return None
    last = runtime.diagnosed.get(key)
    every = timedelta(seconds=runtime.settings.diagnosis_seconds)
    if last is not None and not diagnosis.look_again(last, missing, now, every, forced=forced):
        return last.cause
    cause = await diagnosis.find_cause(runtime.kube, cluster, missing, members, now)
    runtime.diagnosed[key] = diagnosis.Diagnosed(tuple(missing), now, cause)
    return cause


async def release(runtime: Runtime, namespace: str, name: str) -> None:
    """The cluster object is being deleted: what garbage collection leaves behind goes now."""
    for component in COMPONENTS:
        await component.release(runtime.kube, namespace, name)
    runtime.forget((namespace, name))
