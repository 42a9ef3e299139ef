"""The two Leases a sidecar writes, its heartbeat and (as leader) the cluster's membership:
one shape and one write rule, so that the operator reads both the same way."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any


def due(last_key: Hashable | None, current_key: Hashable, last_write: float | None, now: float,
        refresh: float) -> bool:
    """Write on change, plus a slow refresh; never a write per poll."""
    if last_key is None or last_write is None:
        return True
    return last_key != current_key or now - last_write >= refresh


def lease(name: str, namespace: str, *, labels: Mapping[str, str], annotations: Mapping[str, str],
          holder: str, duration: int, renew_time: str, owner: Mapping[str, Any] | None) -> dict[str, Any]:
    """A coordination.k8s.io/v1 Lease; owned (by the workload or the cluster object) so that deleting the cluster
    removes it."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels),
                                "annotations": dict(annotations)}
    if owner:
        metadata["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": renew_time},
    }
