"""What the operator watches: only what its install enables and its RBAC allows, decided at start.

kopf cannot be told to live without a watch: a list or watch answered 403 Forbidden is retried
for `settings.networking.error_backoffs` (about a minute) and then the watcher task fails, and
with it the whole operator (kopf 1.45's orchestrator re-raises it). kopf starts a watch for every
registered handler's resource that the apiserver serves, so a handler on a resource the install
may not read is a crash loop wherever that resource exists. Hence: the watches are decided once,
before the handlers are registered, from the enabled backends (`OperatorSettings.backends`) and a
SelfSubjectAccessReview per resource; a forbidden one is logged, counted
(`raftset_operator_watch_forbidden`) and left out, and only the clusters that need it are
Degraded (`problem`). A resource whose CRD is absent at start needs nothing here: kopf watches
only what the apiserver serves and starts or stops a watch as a CRD comes or goes. One whose CRD
is deleted under a running watch does (`outlive_deleted_crds`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from raftset.workloads import ADVANCED_STATEFULSET, STATEFULSET

log = logging.getLogger("raftset.operator.watches")

EVERY_CLUSTER = "*"  # Watch.needed_by: every cluster reads it (the heartbeat Leases, the pods)
VERBS = ("list", "watch")


@dataclass(frozen=True)
class Watch:
    """A resource the handlers watch, and which clusters cannot be reconciled without it."""

    group: str  # "" for the core API
    version: str
    plural: str
    # EVERY_CLUSTER, the name of the one backend whose clusters need it, or "" when only the
    # drift watch uses it (the periodic resync then stands in for it).
    needed_by: str
    backend: str = ""  # a backend's workload: watched only where that backend is enabled

    @property
    def resource(self) -> tuple[str, ...]:
        """The positional resource of kopf's decorators."""
        return (self.group, self.version, self.plural) if self.group else (self.version, self.plural)

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str | None) -> str:
        """The collection's URL path, in `namespace` or across every one (None)."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{root}/namespaces/{namespace}/{self.plural}" if namespace else f"{root}/{self.plural}"


LEASES = Watch("coordination.k8s.io", "v1", "leases", needed_by=EVERY_CLUSTER)
PODS = Watch("", "v1", "pods", needed_by=EVERY_CLUSTER)
SERVICES = Watch("", "v1", "services", needed_by="")
PDBS = Watch("policy", "v1", "poddisruptionbudgets", needed_by="")
WORKLOADS = {b.name: Watch(b.group, b.version, b.plural, needed_by=b.name, backend=b.name)
             for b in (STATEFULSET, ADVANCED_STATEFULSET)}
ALL = (LEASES, PODS, *WORKLOADS.values(), SERVICES, PDBS)


@dataclass(frozen=True)
class Watches:
    """The decision: the enabled backends, and the watches the RBAC forbids."""

    backends: frozenset[str]
    forbidden: frozenset[Watch] = frozenset()
    namespaces: tuple[str, ...] = ()  # the operator's namespaces; none: every namespace

    def enabled(self, watch: Watch) -> bool:
        """Is `watch` registered with kopf?"""
        return watch not in self.forbidden and (not watch.backend or watch.backend in self.backends)

    def wanted(self) -> tuple[Watch, ...]:
        """The watches worth an access review: all but the workloads of disabled backends."""
        return tuple(w for w in ALL if not w.backend or w.backend in self.backends)


def problem(backend: str, watches: Watches) -> tuple[str, str] | None:
    """Why a cluster of workload kind `backend` cannot be reconciled by this operator, if it cannot."""
    if backend not in watches.backends:
        return ("WorkloadKindNotEnabled",
                f"workloadKind {backend} is not enabled in this operator (RAFTSET_BACKENDS="
                f"{','.join(sorted(watches.backends))}): install with the "
                f"{'kruise' if backend == ADVANCED_STATEFULSET.name else 'statefulset'} overlay, "
                f"or use workloadKind {' or '.join(sorted(watches.backends))}")
    needed = sorted(w.name for w in watches.forbidden if w.needed_by in (EVERY_CLUSTER, backend))
    if needed:
        return ("WatchForbidden",
                f"the operator may not list and watch {', '.join(needed)}, which this cluster needs: "
                f"grant them to its ServiceAccount (docs/install.md)")
    return None


def review(api: client.ApiClient, backends: Sequence[str], namespaces: Sequence[str]) -> Watches:
    """One SelfSubjectAccessReview per wanted resource and verb (cluster-wide, or in each of
    `namespaces` for a namespaced operator); each forbidden watch logged once."""
    decided = Watches(frozenset(backends))
    authz = client.AuthorizationV1Api(api)

    def may(watch: Watch, verb: str, namespace: str) -> bool:
        attributes = client.V1ResourceAttributes(group=watch.group, resource=watch.plural, verb=verb,
                                                 namespace=namespace or None)
        body = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=attributes))
        return bool(authz.create_self_subject_access_review(body).status.allowed)

    forbidden = frozenset(
        w for w in decided.wanted()
        if not all(may(w, verb, ns) for verb in VERBS for ns in (namespaces or [""])))
    unwatched = sorted(w.name for w in WORKLOADS.values() if not decided.enabled(w))
    log.info("workload backends enabled: %s; not watched: %s", ", ".join(sorted(decided.backends)),
             ", ".join(unwatched) or "none")
    for watch in sorted(forbidden, key=lambda w: w.name):
        log.error("the operator may not list and watch %s: not watched; %s", watch.name,
                  "clusters that need it are Degraded (WatchForbidden)" if watch.needed_by
                  else "drift of these objects is repaired by the periodic resync only")
    return Watches(decided.backends, forbidden, tuple(namespaces))


_decided: Watches | None = None


def decide(api: client.ApiClient, backends: Sequence[str], namespaces: Sequence[str]) -> Watches:
    """`review`, kept for the handlers, which are registered when their module is imported."""
    global _decided
    _decided = review(api, backends, namespaces)
    return _decided


def decided() -> Watches:
    if _decided is None:
        raise RuntimeError("the watches are decided (watches.decide) before the handlers are imported")
    return _decided


VANISHED_RETRY_S = 10.0


def outlive_deleted_crds() -> None:
    """Keep a watch whose CRD is deleted from ending the operator.

    When a CRD goes, its watch stream ends and kopf lists again; that list can get 404 before
    kopf's own rescan of the CRDs stops the watch, and kopf (1.45) then ends the whole operator.
    The watcher is wrapped so that a 404 is logged and the list retried later instead: the
    rescan cancels it meanwhile, and a CRD installed again gets a new watch from kopf. kopf has
    no setting for this; the wrapper is on its internal `queueing.watcher`, which its
    orchestrator looks up at each spawn (a kopf that moves it fails this loudly at start).
    """
    from kopf._cogs.clients import errors
    from kopf._core.reactor import queueing

    original = queueing.watcher

    async def watcher(**kwargs: Any) -> None:
        while True:
            try:
                return await original(**kwargs)
            except errors.APINotFoundError:
                log.warning("%s is no longer served (its CRD was deleted): its watch waits for kopf to stop it; "
                            "clusters that need it become Degraded (WorkloadAPIMissing)", kwargs.get("resource"))
                await asyncio.sleep(VANISHED_RETRY_S)

    queueing.watcher = watcher
