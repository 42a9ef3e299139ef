"""Why a member has not joined: the real cause, named in status and Events (issue 14 item 5).

When a kept ordinal has no healthy voter, the plan only says "waiting for ordinal 0 to
join". The cause is usually one step upstream, where a user can fix it: a claim that
stays Pending (with the binder's or provisioner's own event message), a StorageClass that
does not exist (or no default one), or a pod that runs but whose store never started. This
module names it, as pure functions over the objects the reconcile lists only while a
member is missing; the most upstream cause wins. A silent pod's latest Warning Event is quoted:
it carries the kubelet's word (or, in `make run`, the pod runner's `NotRunLocally`), so the
cause shows in `kubectl describe` of the cluster, not only on the pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from raftset import contract
from raftset.operator.pure.heartbeats import HeartbeatRecord
from raftset.operator.pure.storage import CLAIM_TEMPLATE
from raftset.times import parse_rfc3339

Problem = tuple[str, str]
Obj = Mapping[str, Any]

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
# Events of a Pending claim that say it will not bind by itself (the PV controller's
# FailedBinding is a Normal event, yet it is the whole story when nothing can provision).
TELLING_REASONS = frozenset({"FailedBinding", "ProvisioningFailed"})
# A Running pod whose sidecar has published no heartbeat for this long has a store that
# never started. The pod's startTime is the kubelet's clock: only a message depends on it.
NEVER_STARTED_AFTER_SECONDS = 60.0


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def claim_name(cluster: str, ordinal: int) -> str:
    return f"{CLAIM_TEMPLATE}-{contract.pod_name(cluster, ordinal)}"


def _event_time(event: Obj) -> str:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        value = event.get(key)
        if value:
            return str(value)
    return ""


def _about(event: Obj) -> str:
    involved = event.get("involvedObject") or {}
    return str(involved.get("name") or "")


def default_class(classes: Iterable[Obj]) -> str | None:
    for sc in classes:
        if (_meta(sc).get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true":
            return str(_meta(sc).get("name"))
    return None


def storage_class_problem(wanted: str | None, pending: Sequence[str], classes: Sequence[Obj]) -> Problem | None:
    """A Pending claim's class does not exist, or no class is named and none is the default."""
    if not pending:
        return None
    names = {str(_meta(sc).get("name")) for sc in classes}
    claims = ", ".join(pending)
    if wanted and wanted not in names:
        return ("StorageClassMissing",
                f"StorageClass {wanted!r} (spec.storage.storageClassName) does not exist: claim {claims} "
                f"stays Pending until it is created")
    if not wanted and default_class(classes) is None:
        return ("StorageClassMissing",
                f"spec.storage.storageClassName is unset and the cluster has no default StorageClass: claim "
                f"{claims} stays Pending until a default class (annotation {DEFAULT_CLASS_ANNOTATION}) or a "
                f"matching PersistentVolume exists")
    return None


def pending_claims(cluster: str, ordinals: Iterable[int], pvcs: Iterable[Obj]) -> list[str]:
    """The member claims of `ordinals` that exist and are Pending, by name."""
    by_name = {str(_meta(p).get("name")): p for p in pvcs}
    out = []
    for ordinal in ordinals:
        pvc = by_name.get(claim_name(cluster, ordinal))
        if pvc is not None and ((pvc.get("status") or {}).get("phase") or "Pending") == "Pending":
            out.append(claim_name(cluster, ordinal))
    return out


def claim_problem(pending: Sequence[str], events: Iterable[Obj]) -> Problem | None:
    """Pending claims whose latest event says they will not bind by themselves, with that message."""
    latest: dict[str, Obj] = {}
    for event in events:
        name = _about(event)
        if name in pending and (name not in latest or _event_time(event) >= _event_time(latest[name])):
            latest[name] = event
    told = [(name, latest[name]) for name in pending if name in latest
            and (latest[name].get("type") == "Warning" or latest[name].get("reason") in TELLING_REASONS)]
    if not told:
        return None
    return ("ClaimPending", "; ".join(
        f"PersistentVolumeClaim {name} is Pending: {event.get('reason', '')}: {event.get('message', '')}".rstrip()
        for name, event in told))


def _store_state(pod: Obj, store: str) -> str:
    """What the store container's status says, if anything useful."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for st in statuses:
        if st.get("name") != store:
            continue
        state = st.get("state") or {}
        waiting, last = state.get("waiting") or {}, (st.get("lastState") or {})
        terminated = last.get("terminated") or state.get("terminated") or {}
        if waiting.get("reason") and waiting.get("reason") != "ContainerCreating":
            return f"; the {store} container is waiting: {waiting['reason']} {waiting.get('message') or ''}".rstrip()
        if terminated:
            return (f"; the {store} container last exited with code {terminated.get('exitCode')}"
                    f" ({terminated.get('reason') or 'no reason'})")
    return ""


def silent_pods(cluster: str, ordinals: Iterable[int], pods: Iterable[Obj], heartbeats: Sequence[HeartbeatRecord],
                now: datetime) -> list[tuple[str, datetime, Obj]]:
    """Running pods of `ordinals` with no heartbeat at all from their sidecar, past the grace:
    (name, start time, pod)."""
    reported = {r.pod for r in heartbeats}
    wanted = {contract.pod_name(cluster, o) for o in ordinals}
    found = []
    for pod in pods:
        name = str(_meta(pod).get("name"))
        st = pod.get("status") or {}
        started = parse_rfc3339(st.get("startTime"))
        if name not in wanted or name in reported or st.get("phase") != "Running" or _meta(pod).get(
                "deletionTimestamp") or started is None:
            continue
        if (now - started).total_seconds() >= NEVER_STARTED_AFTER_SECONDS:
            found.append((name, started, pod))
    return found


def _latest_warning(pod: str, events: Iterable[Obj]) -> str:
    """The newest Warning Event about the pod: the kubelet's (or make run's pod runner's) own word
    on why its containers do not run."""
    warnings = [e for e in events if e.get("type") == "Warning" and _about(e) == pod
                and (e.get("involvedObject") or {}).get("kind") == "Pod"]
    if not warnings:
        return ""
    latest = max(warnings, key=_event_time)
    return f"; its latest Warning Event: {latest.get('reason', '')}: {latest.get('message', '')}".rstrip()


def never_started(cluster: str, ordinals: Iterable[int], pods: Iterable[Obj], heartbeats: Sequence[HeartbeatRecord],
                  store: str, now: datetime, events: Iterable[Obj] = ()) -> Problem | None:
    """Running pods of `ordinals` with no heartbeat at all from their sidecar, past the grace,
    with what their store container and their latest Warning Event say."""
    events = list(events)
    found = []
    for name, started, pod in silent_pods(cluster, ordinals, pods, heartbeats, now):
        found.append(f"{name} has been Running since {started:%H:%M:%S} but its sidecar never published a "
                     f"heartbeat: its store never started{_store_state(pod, store)}{_latest_warning(name, events)}")
    if not found:
        return None
    return ("StoreNeverStarted", "; ".join(sorted(found)))


def diagnose(cluster: str, missing: Sequence[int], *, storage_class: str | None, ephemeral: bool,
             pvcs: Sequence[Obj], events: Sequence[Obj], classes: Sequence[Obj], pods: Sequence[Obj],
             heartbeats: Sequence[HeartbeatRecord], store: str, now: datetime) -> Problem | None:
    """The most upstream reason the `missing` ordinals have no healthy voter, if one can be named."""
    if not missing:
        return None
    if not ephemeral:
        pending = pending_claims(cluster, missing, pvcs)
        found = storage_class_problem(storage_class, pending, classes) or claim_problem(pending, events)
        if found is not None:
            return found
    return never_started(cluster, missing, pods, heartbeats, store, now, events)



@dataclass(frozen=True)
class Diagnosed:
    """The last look for a cause: which ordinals were missing, when, and the cause it named."""

    missing: tuple[int, ...]
    at: datetime
    cause: Problem | None


def look_again(last: Diagnosed | None, missing: Sequence[int], now: datetime, every: timedelta, *,
               forced: bool = False) -> bool:
    """Is a fresh look (one to four LISTs: pods, claims, Events) due, or does the last one stand?

    A look lists from the apiserver, and a cluster with a missing member asks every tick: a
    fleet of such clusters (a node pool down) listed pods hundreds of times a second, and the
    spec changes' writes waited behind those reads. A cause changes slower than that; a new
    set of missing ordinals or a spec change looks again at once.
    """
    return last is None or forced or last.missing != tuple(missing) or now - last.at >= every
