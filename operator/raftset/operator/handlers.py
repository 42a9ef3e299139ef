"""kopf wiring: which events reach `reconcile`, and the indices it reads. Nothing else.

The reconcile itself is `raftset.operator.reconcile`; the objects it writes are the
components of `raftset.operator.components.registry`.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

import kopf

from raftset import contract, engines
from raftset import replace
from raftset.operator import watches
from raftset.operator.io import apiorder
from raftset.operator.pure.objects import cached, edited_behind_our_back
from raftset.operator.pure import freshness
from raftset.operator.pure.heartbeats import LEASE, SIGHTING
from raftset.operator.io.kube import KubeClient, load_config
from raftset.operator.reconcile import Indices, Key, Runtime, reconcile, release
from raftset.operator.settings import from_env
from raftset.workloads import ADVANCED_STATEFULSET, STATEFULSET

log = logging.getLogger(__name__)
SETTINGS = from_env()
# Only what the install enables and allows is watched: kopf ends the operator on a forbidden watch.
WATCHES = watches.decided()
RECONCILE_INTERVAL = SETTINGS.reconcile_interval
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
    memo.runtime = Runtime(settings=SETTINGS, kube=KubeClient(load_config()), watches=WATCHES)
    for forbidden in WATCHES.forbidden:
        memo.runtime.metrics.watch_forbidden.labels(forbidden.name).set(1)
    memo.runtime.metrics.serve(SETTINGS.metrics_address)


def _if_watched(watch: watches.Watch, decorator: Any) -> Any:
    """`decorator` (a kopf registration on `watch`'s resource) where `watch` is enabled, else none."""
    return decorator if WATCHES.enabled(watch) else (lambda fn: fn)


# --- indices: the API objects each reconcile needs, kept current by kopf's watches ---
# (Coroutines although they never wait: kopf runs a plain function in a worker thread, a thread
# hop per watch event, and heartbeat renewals are the most frequent events there are.)

@_if_watched(watches.LEASES, kopf.index(*watches.LEASES.resource, labels={contract.LABEL_HEARTBEAT: "true"}))
async def heartbeats(namespace: str, name: str, labels: dict[str, str], body: kopf.Body, memo: kopf.Memo,
                     **_: Any) -> dict[Key, Any]:
    """The Lease with the operator's sighting of it: a watch event is the moment a renewal is observed."""
    cluster = labels.get(contract.LABEL_INSTANCE)
    if not cluster:
        return {}
    lease = {
        "metadata": {"annotations": dict(body.metadata.annotations),
                     "resourceVersion": body.metadata.get("resourceVersion")},
        "spec": dict(body.spec),
    }
    seen = memo.runtime.sightings.setdefault((namespace, cluster), {})
    seen[name] = freshness.observe(seen.get(name), freshness.token(lease), datetime.now(timezone.utc))
    return {(namespace, cluster): {LEASE: lease, SIGHTING: seen[name]}}


@_if_watched(watches.LEASES, kopf.index(*watches.LEASES.resource, labels={contract.LABEL_MEMBERSHIP: "true"}))
async def memberships(namespace: str, labels: dict[str, str], annotations: dict[str, str], **_: Any) -> dict[Key, str]:
    """The Raft membership record the cluster's leader published (raftset.membership)."""
    cluster = labels.get(contract.LABEL_INSTANCE)
    raw = annotations.get(contract.ANNOTATION_MEMBERSHIP)
    return {(namespace, cluster): raw} if cluster and raw else {}


@_if_watched(watches.LEASES, kopf.index(*watches.LEASES.resource, labels={contract.LABEL_BACKUP: "true"}))
async def backup_records(namespace: str, labels: dict[str, str], annotations: dict[str, str],
                         **_: Any) -> dict[Key, dict[str, str]]:
    """The backup record and restore failure the leader's (or first member's) sidecar published."""
    cluster = labels.get(contract.LABEL_INSTANCE)
    return {(namespace, cluster): dict(annotations)} if cluster else {}


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
                      heartbeats: Idx = None, memberships: Idx = None, scale_away_marks: Idx = None,
                      replace_requests: Idx = None, statefulsets: Idx = None, advanced_statefulsets: Idx = None,
                      backup_records: Idx = None, **_: Any) -> None:
        indices = Indices.of(heartbeats, memberships, scale_away_marks, replace_requests, statefulsets,
                             advanced_statefulsets, backup_records)
        await reconcile(body, patch, memo.runtime, indices, forced=True,
                        urgency=URGENCY.get(reason, apiorder.BACKGROUND))

    # The id stays `-step`: kopf logs it ("Timer 'etcd-step' succeeded.", raftset.operator.logs).
    @kopf.timer(*resource, id=f"{engine.name}-step", interval=RECONCILE_INTERVAL, sharp=False)
    async def tick(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo,
                   heartbeats: Idx = None, memberships: Idx = None, scale_away_marks: Idx = None,
                   replace_requests: Idx = None, statefulsets: Idx = None, advanced_statefulsets: Idx = None,
                   backup_records: Idx = None, **_: Any) -> None:
        """The timer's round: nothing changed that kopf saw, the pacing decides whether it writes."""
        indices = Indices.of(heartbeats, memberships, scale_away_marks, replace_requests, statefulsets,
                             advanced_statefulsets, backup_records)
        await reconcile(body, patch, memo.runtime, indices, forced=False)

    @kopf.on.delete(*resource, id=f"{engine.name}-delete", optional=True)
    async def deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        # Owned objects go with the owner through garbage collection (PVCs per the
        # retention policy); what is not owned (heartbeat Leases) is released here.
        await release(memo.runtime, body.metadata.namespace, body.metadata.name)


for _engine in engines.ENGINES.values():
    _register(_engine)


# --- drift: an owned object deleted or edited behind our back is re-applied promptly ---

def _mark_drift(body: kopf.Body, memo: kopf.Memo) -> None:
    key = _owner_key(body)
    if key is not None and hasattr(memo, "runtime"):
        memo.runtime.applied_at.pop(key, None)  # the next round re-applies everything


for _owned in (*watches.WORKLOADS.values(), watches.SERVICES, watches.PDBS):
    @_if_watched(_owned, kopf.on.event(*_owned.resource, labels=_MANAGED, id=f"drift-{'-'.join(_owned.resource)}"))
    async def drift(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
        if edited_behind_our_back(type, body):
            _mark_drift(body, memo)
