"""kopf handlers: read the API, call the pure core, write the result. Nothing else.

Every reconcile recomputes the next step from the cluster object, the workload object
and the heartbeat Leases, so an operator restarted in the middle of a scale picks up
exactly where the API says it is. What is kept in memory (indices, locks, the time of
the last full apply) is a cache that a restart simply rebuilds.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from raftset import contract, engines
from raftset.operator import manifests, planner, spec, status, storage, tls
from raftset.operator.kube import Kube, api_error_message, load_config
from raftset.operator.members import from_leases
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


SETTINGS = Settings.from_env()
RECONCILE_INTERVAL = SETTINGS.reconcile_interval


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    prefix = contract.GROUP
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=prefix)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=prefix, key="last-handled-configuration")
    settings.posting.level = logging.WARNING  # handler failures become Events; progress is ours to announce
    settings.watching.server_timeout = 300
    memo.runtime = Runtime(settings=SETTINGS, kube=Kube(load_config()))


# --- indices: the API objects each reconcile needs, kept current by kopf's watches ---

@kopf.index("coordination.k8s.io", "v1", "leases", labels={contract.LABEL_HEARTBEAT: "true"})
def heartbeats(namespace: str, labels: dict[str, str], body: kopf.Body, **_: Any) -> dict[Key, Any]:
    cluster = labels.get(contract.LABEL_INSTANCE)
    if not cluster:
        return {}
    return {(namespace, cluster): {
        "metadata": {"annotations": dict(body.metadata.annotations)},
        "spec": dict(body.spec),
    }}


@kopf.index("pods", annotations={contract.ANNOTATION_SCALE_AWAY: kopf.PRESENT})
def scale_away_marks(namespace: str, name: str, labels: dict[str, str], **_: Any) -> dict[Key, str]:
    cluster = labels.get(contract.LABEL_INSTANCE)
    return {(namespace, cluster): name} if cluster else {}


def _owner_key(body: kopf.Body) -> Key | None:
    for ref in body.metadata.get("ownerReferences") or []:
        if ref.get("apiVersion") == contract.API_VERSION and ref.get("controller"):
            return body.metadata.namespace, ref["name"]
    return None


def _by_owner(body: kopf.Body) -> dict[Key, dict[str, Any]]:
    key = _owner_key(body)
    return {key: copy.deepcopy(dict(body))} if key else {}


# The workloads, so that a tick with nothing to do reads nothing from the apiserver.
_MANAGED = {contract.LABEL_MANAGED_BY: contract.MANAGER}


@kopf.index(STATEFULSET.group, STATEFULSET.version, STATEFULSET.plural, labels=_MANAGED)
def statefulsets(body: kopf.Body, **_: Any) -> dict[Key, dict[str, Any]]:
    return _by_owner(body)


@kopf.index(ADVANCED_STATEFULSET.group, ADVANCED_STATEFULSET.version, ADVANCED_STATEFULSET.plural,
            labels=_MANAGED)
def advanced_statefulsets(body: kopf.Body, **_: Any) -> dict[Key, dict[str, Any]]:
    return _by_owner(body)


@dataclass(frozen=True)
class Indices:
    """kopf's indices a reconcile reads, by what they hold."""

    heartbeats: kopf.Index
    scale_away_marks: kopf.Index
    workloads: dict[str, kopf.Index]  # by Backend.name

    def workload(self, backend: Backend, key: Key) -> dict[str, Any] | None:
        return next(iter(self.workloads[backend.name].get(key, [])), None)

    @classmethod
    def of(cls, heartbeats: kopf.Index, scale_away_marks: kopf.Index, statefulsets: kopf.Index,
           advanced_statefulsets: kopf.Index) -> Indices:
        return cls(heartbeats, scale_away_marks, {STATEFULSET.name: statefulsets,
                                                  ADVANCED_STATEFULSET.name: advanced_statefulsets})


# --- the cluster kinds ---

def _now() -> datetime:
    return datetime.now(timezone.utc)


async def reconcile(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, indices: Indices, *,
                    forced: bool) -> None:
    runtime: Runtime = memo.runtime
    key = (body.metadata.namespace, body.metadata.name)
    lock = runtime.locks.setdefault(key, asyncio.Lock())
    async with lock:
        await _reconcile(runtime, body, patch, indices, forced=forced)


async def _reconcile(runtime: Runtime, body: kopf.Body, patch: kopf.Patch, indices: Indices, *,
                     forced: bool) -> None:
    now = _now()
    key = (body.metadata.namespace, body.metadata.name)
    old_status = dict(body.get("status") or {})
    generation = int(body.metadata.get("generation") or 0)
    members = from_leases(indices.heartbeats.get(key, []))
    marked_pods = list(indices.scale_away_marks.get(key, []))

    def publish(cluster: spec.Cluster | None, plan: planner.Plan | None,
                workload: dict[str, Any] | None, problem: tuple[str, str] | None) -> None:
        new = status.status(cluster, plan, workload, members, old_status, generation, now, problem)
        for kind, reason, message in status.announcements(runtime.published.get(key, old_status), new):
            kopf.event(body, type=kind, reason=reason, message=message)
        runtime.published[key] = new
        if {k: old_status.get(k) for k in new} != new:
            patch.status.update(new)

    try:
        cluster = spec.parse(body, default_workload_kind=runtime.settings.default_workload_kind,
                             sidecar_image=runtime.settings.sidecar_image)
    except spec.InvalidSpec as error:
        publish(None, None, None, ("InvalidSpec", str(error)))
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

    def next_step(workload: dict[str, Any] | None) -> planner.Plan:
        current = backend.scale(workload) if workload is not None else None
        return planner.plan(cluster.name, backend, cluster.replicas, current, members, now)

    workload = cached if cached is not None else await read_workload()
    plan = next_step(workload)
    if cached is not None and plan.action in planner.STEP_REASONS:
        # The index may trail our own last write by a watch event; a step is planned on
        # what the apiserver says now, so that no step is taken twice.
        workload = await read_workload()
        plan = next_step(workload)

    problem = None
    stepping = plan.action in planner.STEP_REASONS
    period = runtime.settings.resync_period(status.degraded(old_status))
    due = now.timestamp() - runtime.applied_at.get(key, 0.0) >= period
    write = stepping or forced or due
    try:
        # TLS material and PVC expansion first: pods must find their Secrets and sizes.
        tls_state = await tls.ensure_tls(runtime.kube, cluster, now, workload=workload, write=write)
        claims, problem = await storage.ensure_claims(runtime.kube, cluster, workload, write=write)
        problem = tls_state.problem or problem
        for pod in planner.stale_marks(plan, marked_pods):
            await runtime.kube.merge_patch("v1", "Pod", cluster.namespace, pod, {
                "metadata": {"annotations": {contract.ANNOTATION_SCALE_AWAY: None}}})
        for pod in plan.scale_away:
            # Informational for humans and the sidecar; the workload object is what decides.
            await runtime.kube.merge_patch("v1", "Pod", cluster.namespace, pod, {
                "metadata": {"annotations": {contract.ANNOTATION_SCALE_AWAY: "true"}}})
        if write:
            for manifest in manifests.owned_objects(cluster, plan.replicas, plan.reserved,
                                                    tls_revision=tls_state.revision, claims=claims):
                applied = await runtime.kube.apply(manifest)
                if manifest["kind"] == backend.kind and manifest["apiVersion"] == backend.api_version:
                    workload = applied
            runtime.applied_at[key] = now.timestamp()
    except ApiException as error:
        # Announced once through the Degraded condition, not on every reconcile.
        problem = ("ApplyFailed", api_error_message(error))

    if stepping and problem is None:
        kopf.event(body, type="Normal", reason=planner.STEP_REASONS[plan.action], message=plan.message)
        if plan.hand_off_from:
            kopf.event(body, type="Normal", reason="LeaderHandOff",
                      message=f"{plan.hand_off_from} is the leader and is being scaled away: "
                              f"its sidecar moves leadership to a follower before leaving")
    publish(cluster, plan, workload, problem)


def _register(engine: engines.Engine) -> None:
    resource = (contract.GROUP, contract.VERSION, engine.plural)

    @kopf.on.resume(*resource, id=f"{engine.name}-resume")
    @kopf.on.create(*resource, id=f"{engine.name}-create")
    @kopf.on.update(*resource, id=f"{engine.name}-update", field="spec")
    async def changed(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo,
                      heartbeats: kopf.Index, scale_away_marks: kopf.Index,
                      statefulsets: kopf.Index, advanced_statefulsets: kopf.Index, **_: Any) -> None:
        indices = Indices.of(heartbeats, scale_away_marks, statefulsets, advanced_statefulsets)
        await reconcile(body, patch, memo, indices, forced=True)

    @kopf.timer(*resource, id=f"{engine.name}-step", interval=RECONCILE_INTERVAL, sharp=False)
    async def step(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo,
                   heartbeats: kopf.Index, scale_away_marks: kopf.Index,
                   statefulsets: kopf.Index, advanced_statefulsets: kopf.Index, **_: Any) -> None:
        indices = Indices.of(heartbeats, scale_away_marks, statefulsets, advanced_statefulsets)
        await reconcile(body, patch, memo, indices, forced=False)

    @kopf.on.delete(*resource, id=f"{engine.name}-delete", optional=True)
    async def deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        # Owned objects go with the owner through garbage collection (PVCs per the
        # retention policy); heartbeat Leases of pods that never cleaned up go here.
        runtime: Runtime = memo.runtime
        namespace, name = body.metadata.namespace, body.metadata.name
        selector = f"{contract.LABEL_INSTANCE}={name},{contract.LABEL_HEARTBEAT}=true"
        for lease in await runtime.kube.list("coordination.k8s.io/v1", "Lease", namespace, selector):
            await runtime.kube.delete("coordination.k8s.io/v1", "Lease", namespace,
                                      lease["metadata"]["name"])
        runtime.locks.pop((namespace, name), None)
        runtime.applied_at.pop((namespace, name), None)
        runtime.published.pop((namespace, name), None)


for _engine in engines.ENGINES.values():
    _register(_engine)


# --- drift: an owned object deleted or edited behind our back is re-applied promptly ---

def _mark_drift(body: kopf.Body, memo: kopf.Memo) -> None:
    key = _owner_key(body)
    if key is not None and hasattr(memo, "runtime"):
        memo.runtime.applied_at.pop(key, None)  # the next step re-applies everything


for _owned in (
    (STATEFULSET.group, STATEFULSET.version, STATEFULSET.plural),
    (ADVANCED_STATEFULSET.group, ADVANCED_STATEFULSET.version, ADVANCED_STATEFULSET.plural),
    ("v1", "services"),
    ("policy", "v1", "poddisruptionbudgets"),
):
    @kopf.on.event(*_owned, labels=_MANAGED, id=f"drift-{'-'.join(_owned)}")
    def drift(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
        if manifests.edited_behind_our_back(type, body):
            _mark_drift(body, memo)
