"""kopf wiring: which events reach `reconcile`, and the indices it reads. Nothing else.

A cluster is reconciled on its spec change (kopf's create/update/resume handler), and otherwise by
its daemon, which sleeps on the cluster's alarm (raftset.operator.alarms): rung by a watch event of
something the cluster reads (its object's annotations, workload, pods, membership, backup and
heartbeat Leases, a heartbeat only when it says something new), set by each round to the next moment
a decision turns on time (raftset.operator.pure.wakeup). The reconcile itself is
`raftset.operator.reconcile`; the objects it writes are the components of
`raftset.operator.components.registry`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from raftset import contract, engines
from raftset import replace
from raftset.operator import watches
from raftset.operator.io import apiorder
from raftset.operator.pure.objects import cached, edited_behind_our_back
from raftset.operator.io import kube
from raftset.operator.io.leasewatch import LeaseWatch
from raftset.operator.reconcile import Indices, Key, Runtime, reconcile, release
from raftset.operator.settings import from_env
from raftset.workloads import ADVANCED_STATEFULSET, STATEFULSET

log = logging.getLogger(__name__)
SETTINGS = from_env()
# Only what the install enables and allows is watched: kopf ends the operator on a forbidden watch.
WATCHES = watches.decided()
# A spec change's API calls go first, then a new cluster's, then every other reconcile's: a burst
# of reconciles (an operator restart, a thousand new clusters) never queues ahead of a spec change.
URGENCY = {kopf.Reason.UPDATE: apiorder.SPEC_CHANGE, kopf.Reason.CREATE: apiorder.CREATION}


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    prefix = contract.GROUP
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=prefix)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=prefix, key="last-handled-configuration")
    settings.posting.level = logging.WARNING  # handler failures become Events; progress is ours to announce
    settings.watching.server_timeout = 300
    settings.networking.error_backoffs = SETTINGS.api_error_backoffs
    log.info("API errors retried after %s s, then given up", ", ".join(f"{d:g}" for d in SETTINGS.api_error_backoffs))
    runtime = memo.runtime = Runtime(settings=SETTINGS, kube=await kube.connect(), watches=WATCHES)
    memo.tasks = [asyncio.create_task(runtime.staleness.run(), name="raftset-staleness")]
    if WATCHES.enabled(watches.LEASES):
        memo.watch_client = runtime.kube.watch_client(max(1, len(WATCHES.namespaces)))
        lease_watch = LeaseWatch(memo.watch_client, runtime.leases, WATCHES.namespaces, runtime.lease_changed)
        runtime.leases_listed = lease_watch.listed
        runtime.metrics.lease_relists.set_function(lambda: lease_watch.relists)
        memo.tasks.append(asyncio.create_task(lease_watch.run(), name="raftset-leases"))
    else:
        runtime.leases_listed.set()  # nothing to wait for: the clusters are refused (watches.problem)
    for forbidden in WATCHES.forbidden:
        memo.runtime.metrics.watch_forbidden.labels(forbidden.name).set(1)
    memo.runtime.metrics.serve(SETTINGS.metrics_address)


@kopf.on.cleanup()
async def disconnect(memo: kopf.Memo, **_: Any) -> None:
    """The client session's connections closed as the operator stops."""
    for task in getattr(memo, "tasks", []):
        task.cancel()
    if hasattr(memo, "watch_client"):
        await memo.watch_client.close()
    if hasattr(memo, "runtime"):
        await memo.runtime.kube.close()


def _if_watched(watch: watches.Watch, decorator: Any) -> Any:
    """`decorator` (a kopf registration on `watch`'s resource) where `watch` is enabled, else none."""
    return decorator if WATCHES.enabled(watch) else (lambda fn: fn)


# --- indices: the API objects each reconcile needs, kept current by kopf's watches ---
# (Coroutines although they never wait: kopf runs a plain function in a worker thread, a thread
# hop per watch event.) The clusters' Leases are not among them: the operator's own watch keeps
# them (raftset.operator.io.leasewatch, into Runtime.leases).

@_if_watched(watches.PODS, kopf.index(*watches.PODS.resource, annotations={contract.ANNOTATION_SCALE_AWAY: kopf.PRESENT}))
async def scale_away_marks(namespace: str, name: str, labels: dict[str, str], **_: Any) -> dict[Key, str]:
    cluster = labels.get(contract.LABEL_INSTANCE)
    return {(namespace, cluster): name} if cluster else {}


def _replace_annotated(annotations: kopf.Annotations, **_: Any) -> bool:
    return contract.ANNOTATION_REPLACE in annotations or contract.ANNOTATION_REPLACE_PROGRESS in annotations


@_if_watched(watches.PODS, kopf.index(*watches.PODS.resource, labels={contract.LABEL_NAME: contract.MANAGER},
                                       when=_replace_annotated))
async def replace_requests(namespace: str, name: str, labels: dict[str, str], annotations: dict[str, str],
                           **_: Any) -> dict[Key, dict[str, Any]]:
    """Pods asked to replace their member, and the sidecar's record of each step (raftset.sidecar.pure.replace)."""
    cluster = labels.get(contract.LABEL_INSTANCE)
    if not cluster:
        return {}
    return {(namespace, cluster): {"pod": name, "requested": replace.requested(annotations),
                                   "progress": annotations.get(contract.ANNOTATION_REPLACE_PROGRESS)}}


def _owner_key(body: kopf.Body) -> Key | None:
    for ref in body.metadata.get("ownerReferences") or []:
        if ref.get("apiVersion") == contract.API_VERSION and ref.get("controller"):
            return body.metadata.namespace, ref["name"]
    return None


def _by_owner(body: kopf.Body) -> dict[Key, dict[str, Any]]:
    key = _owner_key(body)
    return {key: cached(body)} if key else {}


# The workloads, so that a tick with nothing to do reads nothing from the apiserver.
_MANAGED = {contract.LABEL_MANAGED_BY: contract.MANAGER}


@_if_watched(watches.WORKLOADS[STATEFULSET.name],
             kopf.index(STATEFULSET.group, STATEFULSET.version, STATEFULSET.plural, labels=_MANAGED))
async def statefulsets(body: kopf.Body, **_: Any) -> dict[Key, dict[str, Any]]:
    return _by_owner(body)


@_if_watched(watches.WORKLOADS[ADVANCED_STATEFULSET.name],
             kopf.index(ADVANCED_STATEFULSET.group, ADVANCED_STATEFULSET.version, ADVANCED_STATEFULSET.plural,
                        labels=_MANAGED))
async def advanced_statefulsets(body: kopf.Body, **_: Any) -> dict[Key, dict[str, Any]]:
    return _by_owner(body)


Idx = kopf.Index | None  # None: not watched here (watches.Watches), the reconcile refuses what needs it


def _register(engine: engines.Engine) -> None:
    resource = (contract.GROUP, contract.VERSION, engine.plural)

    @kopf.on.resume(*resource, id=f"{engine.name}-resume")
    @kopf.on.create(*resource, id=f"{engine.name}-create")
    @kopf.on.update(*resource, id=f"{engine.name}-update", field="spec")
    async def changed(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, reason: kopf.Reason,
                      scale_away_marks: Idx = None, replace_requests: Idx = None, statefulsets: Idx = None,
                      advanced_statefulsets: Idx = None, **_: Any) -> None:
        indices = Indices.of(memo.runtime.leases, scale_away_marks, replace_requests, statefulsets,
                             advanced_statefulsets)
        await reconcile(body, patch, memo.runtime, indices, forced=True,
                        urgency=URGENCY.get(reason, apiorder.BACKGROUND))

    # The id stays `-step`: kopf logs it ("Daemon 'etcd-step' ...", raftset.operator.logs). The daemon
    # is cancelled a second after its cluster is deleted or the operator stops: it holds no state.
    @kopf.daemon(*resource, id=f"{engine.name}-step", cancellation_timeout=1.0)
    async def step(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped,
                   scale_away_marks: Idx = None, replace_requests: Idx = None, statefulsets: Idx = None,
                   advanced_statefulsets: Idx = None, **_: Any) -> None:
        """The cluster's rounds between spec changes: each when its alarm goes (rung or due)."""
        runtime: Runtime = memo.runtime
        key: Key = (body.metadata.namespace, body.metadata.name)
        indices = Indices.of(runtime.leases, scale_away_marks, replace_requests, statefulsets,
                             advanced_statefulsets)

        alarm = runtime.alarm(key)
        while not stopped:
            await alarm.sleep()
            if stopped:
                return
            patch = kopf.Patch()
            try:
                await reconcile(body, patch, runtime, indices, forced=False)
                await _write(runtime, body, patch)
            except Exception:  # the alarm is set for a retry (reconcile); kopf would end the daemon
                log.exception("the round of %s/%s failed", *key)

    @kopf.on.delete(*resource, id=f"{engine.name}-delete", optional=True)
    async def deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        # Owned objects go with the owner through garbage collection (PVCs per the
        # retention policy); what is not owned (heartbeat Leases) is released here.
        await release(memo.runtime, body.metadata.namespace, body.metadata.name)


async def _write(runtime: Runtime, body: kopf.Body, patch: kopf.Patch) -> None:
    """A daemon's round's patch: kopf applies a handler's patch only when the handler returns."""
    namespace, name = body.metadata.namespace, body.metadata.name
    api_version, kind = str(body["apiVersion"]), str(body["kind"])
    status = patch.get("status")
    rest = {k: v for k, v in patch.items() if k != "status"}
    if rest:
        await runtime.kube.merge_patch(api_version, kind, namespace, name, rest)
    if status:
        await runtime.kube.merge_patch(api_version, kind, namespace, name, {"status": status}, subresource="status")


for _engine in engines.ENGINES.values():
    _register(_engine)


# --- what rings a cluster's alarm, besides its indices above ---

_KOPF_ANNOTATIONS = f"{contract.GROUP}/last-handled-configuration"


def _ringing_annotations(annotations: kopf.Annotations) -> dict[str, str]:
    """The cluster object's annotations a round reads (kopf's own record of the spec it handled is not)."""
    return {k: v for k, v in annotations.items() if k != _KOPF_ANNOTATIONS}


for _engine in engines.ENGINES.values():
    @kopf.on.event(contract.GROUP, contract.VERSION, _engine.plural, id=f"{_engine.name}-annotations")
    async def annotated(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
        """A request on the cluster object (backup-now, a replacement, ...): our own status patches ring nothing."""
        if not hasattr(memo, "runtime"):
            return
        key = (body.metadata.namespace, body.metadata.name)
        annotations = _ringing_annotations(body.metadata.annotations)
        if memo.runtime.annotations_seen.get(key) != annotations:
            memo.runtime.annotations_seen[key] = annotations
            memo.runtime.ring(key)


def _deleted(type: str | None, **_: Any) -> bool:
    return type == "DELETED"


@_if_watched(watches.PODS, kopf.on.event(*watches.PODS.resource, labels={contract.LABEL_NAME: contract.MANAGER},
                                          id="pods-ring"))
async def pod_changed(namespace: str, labels: dict[str, str], memo: kopf.Memo, **_: Any) -> None:
    cluster = labels.get(contract.LABEL_INSTANCE)
    if cluster and hasattr(memo, "runtime"):
        memo.runtime.ring((namespace, cluster))


# --- drift: an owned object deleted or edited behind our back is re-applied promptly ---

def _mark_drift(body: kopf.Body, memo: kopf.Memo) -> None:
    key = _owner_key(body)
    if key is not None and hasattr(memo, "runtime"):
        memo.runtime.applied_at.pop(key, None)  # the next round re-applies everything
        memo.runtime.ring(key)


for _owned in (*watches.WORKLOADS.values(), watches.SERVICES, watches.PDBS):
    @_if_watched(_owned, kopf.on.event(*_owned.resource, labels=_MANAGED, id=f"drift-{'-'.join(_owned.resource)}"))
    async def drift(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
        if edited_behind_our_back(type, body):
            _mark_drift(body, memo)
        elif body.get("kind") in (STATEFULSET.kind, ADVANCED_STATEFULSET.kind):
            # The workload's controller moved its status (pods ready, a revision rolled out).
            key = _owner_key(body)
            if key is not None and hasattr(memo, "runtime"):
                memo.runtime.ring(key)
