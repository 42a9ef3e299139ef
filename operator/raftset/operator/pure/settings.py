"""The operator's configuration as plain data, and the pacing it decides (raftset.operator.settings reads it
from the environment)."""

from __future__ import annotations

from dataclasses import dataclass

from raftset.operator.pure import spec
from raftset.operator.pure.planner import STUCK_AFTER_SECONDS
from raftset.workloads import BACKENDS, STATEFULSET


def enabled_backends(listed: str | None, default_workload_kind: str) -> tuple[str, ...]:
    """The workload backends this install serves: RAFTSET_BACKENDS (comma-separated backend
    names), or where unset the builtin StatefulSet plus the default workload kind.

    The operator watches only these backends' workloads, so an install whose RBAC grants
    nothing on apps.kruise.io never watches Advanced StatefulSets (docs/install.md).
    """
    names = ([n.strip() for n in listed.split(",") if n.strip()] if listed is not None
             else [STATEFULSET.name, default_workload_kind])
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise ValueError(f"RAFTSET_BACKENDS names unknown backends {unknown}; known: {sorted(BACKENDS)}")
    if default_workload_kind not in names:
        raise ValueError(f"RAFTSET_DEFAULT_WORKLOAD_KIND {default_workload_kind} is not among "
                         f"RAFTSET_BACKENDS {names}")
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class OperatorSettings:
    """Per-operator defaults; everything per cluster is in its spec."""

    default_workload_kind: str = "StatefulSet"
    backends: tuple[str, ...] = (STATEFULSET.name,)  # the enabled ones (enabled_backends)
    sidecar_image: str = spec.DEFAULT_SIDECAR_IMAGE
    reconcile_interval: float = 5.0
    resync_seconds: float = 600.0  # drift is seen by watches; this is the safety net
    retry_seconds: float = 60.0  # the resync of a Degraded cluster: a fixed cause is noticed soon
    # How old the heartbeat times shown in the status may grow while nothing else in it changes.
    status_refresh_seconds: float = 600.0
    # How long the cause named for a missing member stands before the pods are listed again.
    diagnosis_seconds: float = 15.0
    stuck_seconds: float = STUCK_AFTER_SECONDS  # a step Raft has not confirmed by then is Degraded
    metrics_address: str = ""  # host:port of /metrics; "" serves none (the manager Deployment sets it)
    # The delays of kopf's retries of a failed API call or watch, after which it gives up (a watch
    # given up on ends the operator: its Deployment restarts it). kopf's own default.
    api_error_backoffs: tuple[float, ...] = (1, 1, 2, 3, 5, 8, 13, 21)

    def resync_period(self, degraded: bool) -> float:
        """How long a full re-apply may wait: shorter while the cluster is Degraded."""
        return self.retry_seconds if degraded else self.resync_seconds

    def write_due(self, *, stepping: bool, forced: bool, degraded: bool, since_applied: float) -> bool:
        """Does this reconcile apply the owned objects, or only check them?

        A step, a spec change (forced) or an overdue resync writes; a quiet tick reads
        only kopf's indices, so hundreds of idle clusters cost the apiserver nothing.
        """
        return stepping or forced or self.resync_due(degraded=degraded, since_applied=since_applied)

    def resync_due(self, *, degraded: bool, since_applied: float) -> bool:
        """Is a full re-apply due: every object applied, even those this process applied unchanged?"""
        return since_applied >= self.resync_period(degraded)


def backoffs(listed: str | None, default: tuple[float, ...]) -> tuple[float, ...]:
    """RAFTSET_API_ERROR_BACKOFFS: comma-separated seconds, at least one, none negative."""
    if listed is None:
        return default
    try:
        delays = tuple(float(d) for d in listed.split(",") if d.strip())
    except ValueError:
        delays = ()
    if not delays or any(d < 0 for d in delays):
        raise ValueError(f"RAFTSET_API_ERROR_BACKOFFS must list seconds, e.g. '1,1,2,3', not {listed!r}")
    return delays
