"""The operator's configuration: environment variables set by the kustomize overlay."""

from __future__ import annotations

import os

from raftset.operator.pure.settings import OperatorSettings, backoffs, enabled_backends


def from_env() -> OperatorSettings:
    """The settings the environment gives; a variable not set keeps its default."""
    env = os.environ
    default = OperatorSettings()
    default_workload_kind = env.get("RAFTSET_DEFAULT_WORKLOAD_KIND", default.default_workload_kind)
    return OperatorSettings(
        default_workload_kind=default_workload_kind,
        backends=enabled_backends(env.get("RAFTSET_BACKENDS"), default_workload_kind),
        sidecar_image=env.get("RAFTSET_SIDECAR_IMAGE", default.sidecar_image),
        reconcile_interval=float(env.get("RAFTSET_RECONCILE_INTERVAL", default.reconcile_interval)),
        resync_seconds=float(env.get("RAFTSET_RESYNC_SECONDS", default.resync_seconds)),
        retry_seconds=float(env.get("RAFTSET_RETRY_SECONDS", default.retry_seconds)),
        status_refresh_seconds=float(env.get("RAFTSET_STATUS_REFRESH_SECONDS", default.status_refresh_seconds)),
        diagnosis_seconds=float(env.get("RAFTSET_DIAGNOSIS_SECONDS", default.diagnosis_seconds)),
        stuck_seconds=float(env.get("RAFTSET_STEP_STUCK_SECONDS", default.stuck_seconds)),
        metrics_address=env.get("RAFTSET_METRICS_ADDRESS", default.metrics_address),
        api_error_backoffs=backoffs(env.get("RAFTSET_API_ERROR_BACKOFFS"), default.api_error_backoffs),
    )
