"""kopf wiring: which events reach `reconcile`, and the operator's own watches it reads. Nothing else.

A cluster is reconciled on its spec change (kopf's create/update/resume handler), and otherwise by
its daemon, which sleeps on the cluster's alarm (raftset.operator.alarms): rung by a watch event of
something the cluster reads (its object's annotations through kopf; its workload, member pods,
membership, backup and heartbeat Leases through the operator's own watches, raftset.operator.io.objectwatch,
a heartbeat only when it says something new), set by each round to the next moment a decision turns
on time (raftset.operator.pure.wakeup). kopf keeps no index: its start waits for every indexed object
first, a cost that grows with the square of the objects. The reconcile itself is
`raftset.operator.reconcile`; the objects it writes are the components of
`raftset.operator.components.registry`."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from raftset import contract, engines
from raftset.operator import watches
from raftset.operator.io import apiorder
from raftset.operator.pure.objects import edited_behind_our_back
from raftset.operator.pure.workloadbook import owner
from raftset.operator.io import kube
from raftset.operator.io.objectwatch import SILENCE_S, ObjectWatch
from raftset.operator.reconcile import Indices, Key, Runtime, reconcile, release
from raftset.operator.settings import from_env

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
    runtime = Runtime(settings=SETTINGS, kube=await kube.connect(), watches=WATCHES)
    try:  # first: kopf retries a failed startup, and what an earlier attempt started would run twice
        runtime.metrics.serve(SETTINGS.metrics_address)
    except BaseException:
        await runtime.kube.close()
        raise
    memo.runtime = runtime
    for forbidden in WATCHES.forbidden:
        runtime.metrics.watch_forbidden.labels(forbidden.name).set(1)
    memo.tasks = [asyncio.create_task(runtime.staleness.run(), name="raftset-staleness")]
    own = _own_watches(runtime)
    memo.watch_client = runtime.kube.watch_client(max(1, len(WATCHES.namespaces)) * max(1, len(own)))
    started = [ObjectWatch(memo.watch_client, watch, selector, book, WATCHES.namespaces, changed,
                           silence_s=SILENCE_S if watch == watches.LEASES else None)
               for watch, selector, book, changed in own]
    for watch in started:
        memo.tasks.append(asyncio.create_task(watch.run(), name=f"raftset-watch-{watch.name}"))
        if watch.name == watches.LEASES.name:
            runtime.metrics.lease_relists.set_function(lambda lease_watch=watch: lease_watch.relists)
    memo.tasks.append(asyncio.create_task(_all_listed(runtime, started), name="raftset-listed"))


def _own_watches(runtime: Runtime) -> list[tuple[watches.Watch, str, Any, Any]]:
    """The watches the operator keeps itself, of those enabled here: (resource, label selector, book,
    what hears its changes). A forbidden one stays empty; the clusters that need it are refused."""
    wanted = [(watches.LEASES, contract.LABEL_INSTANCE, runtime.leases, runtime.lease_changed),
              (watches.PODS, f"{contract.LABEL_NAME}={contract.MANAGER}", runtime.pods, runtime.changed),
              *((watches.WORKLOADS[name], _MANAGED_SELECTOR, book, runtime.changed)
                for name, book in runtime.workloads.items())]
    return [entry for entry in wanted if WATCHES.enabled(entry[0])]


async def _all_listed(runtime: Runtime, started: list[ObjectWatch]) -> None:
    await asyncio.gather(*(watch.listed.wait() for watch in started))
    runtime.listed.set()


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


# The objects the operator manages carry this label; its own watches and kopf's select on it.
_MANAGED = {contract.LABEL_MANAGED_BY: contract.MANAGER}
_MANAGED_SELECTOR = ",".join(f"{label}={value}" for label, value in _MANAGED.items())


def _register(engine: engines.Engine) -> None:
    resource = (contract.GROUP, contract.VERSION, engine.plural)

    @kopf.on.resume(*resource, id=f"{engine.name}-resume")
    @kopf.on.create(*resource, id=f"{engine.name}-create")
    @kopf.on.update(*resource, id=f"{engine.name}-update", field="spec")
    async def changed(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, reason: kopf.Reason, **_: Any) -> None:
        await reconcile(body, patch, memo.runtime, Indices.of(memo.runtime), forced=True,
                        urgency=URGENCY.get(reason, apiorder.BACKGROUND))

    # The id stays `-step`: kopf logs it ("Daemon 'etcd-step' ...", raftset.operator.logs). The daemon
    # is cancelled a second after its cluster is deleted or the operator stops: it holds no state.
    @kopf.daemon(*resource, id=f"{engine.name}-step", cancellation_timeout=1.0)
    async def step(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any) -> None:
        """The cluster's rounds between spec changes: each when its alarm goes (rung or due)."""
        runtime: Runtime = memo.runtime
        key: Key = (body.metadata.namespace, body.metadata.name)
        indices = Indices.of(runtime)

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


# --- drift: an owned object deleted or edited behind our back is re-applied promptly ---

def _mark_drift(body: kopf.Body, memo: kopf.Memo) -> None:
    key = owner(body)
    if key is not None and hasattr(memo, "runtime"):
        memo.runtime.drifted(key)
        memo.runtime.ring(key)


for _owned in (watches.SERVICES, watches.PDBS):
    @_if_watched(_owned, kopf.on.event(*_owned.resource, labels=_MANAGED, id=f"drift-{'-'.join(_owned.resource)}"))
    async def drift(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
        if edited_behind_our_back(type, body):
            _mark_drift(body, memo)
