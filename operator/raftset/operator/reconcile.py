"""One reconcile of one cluster: read the API, call the pure core, walk the components, publish status.

Every reconcile recomputes the next step from the cluster object, the workload object
(with the step it records), the membership Lease and the heartbeat Leases, so an
operator restarted in the middle of a scale picks up exactly where the API says it is. What is kept in memory (indices, locks, the time of
the last full apply) is a cache that a restart simply rebuilds.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from raftset import contract
from raftset.membership import ScaleStep, parse_membership, parse_step
from raftset.operator import planner, rolls, spec, status
from raftset.operator.components import COMPONENTS, Step
from raftset.operator.kube import Kube, api_error_message
from raftset.operator.heartbeats import from_leases
from raftset.operator.settings import Settings
from raftset.workloads import ADVANCED_STATEFULSET, STATEFULSET, Backend

Key = tuple[str, str]  # (namespace, cluster name)


@dataclass
class Runtime:
    """Per-process caches; none of it is needed to resume after a restart."""

    settings: Settings
    kube: Kube
    locks: dict[Key, asyncio.Lock] = field(default_factory=dict)
    applied_at: dict[Key, float] = field(default_factory=dict)
    # The last status computed per cluster: a reconcile may run on a body that does not
    # show our previous status patch yet, and must not announce the same change twice.
    published: dict[Key, dict[str, Any]] = field(default_factory=dict)

    def forget(self, key: Key) -> None:
        self.locks.pop(key, None)
        self.applied_at.pop(key, None)
        self.published.pop(key, None)


@dataclass(frozen=True)
class Indices:
    """kopf's indices a reconcile reads, by what they hold."""

    heartbeats: kopf.Index
    memberships: kopf.Index
    scale_away_marks: kopf.Index
    workloads: dict[str, kopf.Index]  # by Backend.name

    def workload(self, backend: Backend, key: Key) -> dict[str, Any] | None:
        return next(iter(self.workloads[backend.name].get(key, [])), None)

    @classmethod
    def of(cls, heartbeats: kopf.Index, memberships: kopf.Index, scale_away_marks: kopf.Index,
           statefulsets: kopf.Index, advanced_statefulsets: kopf.Index) -> Indices:
        return cls(heartbeats, memberships, scale_away_marks,
                   {STATEFULSET.name: statefulsets, ADVANCED_STATEFULSET.name: advanced_statefulsets})


def _now() -> datetime:
    return datetime.now(timezone.utc)


async def reconcile(body: kopf.Body, patch: kopf.Patch, runtime: Runtime, indices: Indices, *,
                    forced: bool) -> None:
    key = (body.metadata.namespace, body.metadata.name)
    async with runtime.locks.setdefault(key, asyncio.Lock()):
        await _reconcile(runtime, body, patch, indices, forced=forced)


async def _reconcile(runtime: Runtime, body: kopf.Body, patch: kopf.Patch, indices: Indices, *,
                     forced: bool) -> None:
    now = _now()
    key = (body.metadata.namespace, body.metadata.name)
    old_status = dict(body.get("status") or {})
    generation = int(body.metadata.get("generation") or 0)
    members = from_leases(indices.heartbeats.get(key, []))
    raft = parse_membership(next(iter(indices.memberships.get(key, [])), None))

    def publish(cluster: spec.Cluster | None, plan: planner.Plan | None,
                workload: dict[str, Any] | None, problem: tuple[str, str] | None) -> None:
        new = status.status(cluster, plan, workload, members, old_status, generation, now, problem, raft=raft)
        for kind, reason, message in status.announcements(runtime.published.get(key, old_status), new):
            kopf.event(body, type=kind, reason=reason, message=message)
        runtime.published[key] = new
        if {k: old_status.get(k) for k in new} != new:
            patch.status.update(new)

    try:
        cluster = spec.parse(body, default_workload_kind=runtime.settings.default_workload_kind,
                             sidecar_image=runtime.settings.sidecar_image)
    except spec.InvalidSpec as error:
        publish(None, None, None, (error.reason, str(error)))
        return

    backend = cluster.backend
    cached = indices.workload(backend, key)
    if cached is None and not await runtime.kube.has_api(backend.api_version, backend.kind):
        publish(cluster, None, None, (
            "WorkloadAPIMissing",
            f"workloadKind {backend.name} needs {backend.kind}.{backend.group}/{backend.version}, "
            f"which this cluster does not serve: install OpenKruise or use workloadKind StatefulSet"))
        return

    async def read_workload() -> dict[str, Any] | None:
        return await runtime.kube.get(backend.api_version, backend.kind, cluster.namespace, cluster.name)

    def recorded(workload: dict[str, Any] | None) -> ScaleStep | None:
        annotations = ((workload or {}).get("metadata") or {}).get("annotations") or {}
        return parse_step(annotations.get(contract.ANNOTATION_SCALE_STEP))

    async def next_step(workload: dict[str, Any] | None) -> planner.Plan:
        current = backend.scale(workload) if workload is not None else None
        plan = planner.plan(cluster.name, backend, cluster.replicas, current, members, raft, now,
                            pending=recorded(workload), stuck_after=runtime.settings.stuck_seconds)
        if plan.action != "steady" or workload is None or not rolls.pending(workload):
            return plan
        # Some pods run an older template: only now is the pod list worth a request.
        selector = ",".join(f"{k}={v}" for k, v in sorted(contract.selector_labels(cluster.name).items()))
        pods = await runtime.kube.list("v1", "Pod", cluster.namespace, selector)
        revision = rolls.update_revision(workload)
        assert revision is not None  # rolls.pending checked it
        return rolls.next_step(plan, revision, rolls.pod_revisions(pods, cluster.name), members, now,
                               settle=timedelta(seconds=cluster.sidecar.heartbeat_interval))

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
        kopf.event(body, type="Normal", reason=planner.STEP_REASONS[plan.action], message=plan.message)
        if plan.hand_off_from:
            going = "restarted on the new template" if plan.restart else "scaled away"
            kopf.event(body, type="Normal", reason="LeaderHandOff",
                       message=f"{plan.hand_off_from} is the leader and is being {going}: "
                               f"its sidecar moves leadership to a follower before its store stops")
    publish(cluster, plan, step.workload, problem)


async def release(runtime: Runtime, namespace: str, name: str) -> None:
    """The cluster object is being deleted: what garbage collection leaves behind goes now."""
    for component in COMPONENTS:
        await component.release(runtime.kube, namespace, name)
    runtime.forget((namespace, name))
