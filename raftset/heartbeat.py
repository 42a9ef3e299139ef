"""The heartbeat record: what a sidecar publishes about its member, in one shape.

The sidecar serves the document on `GET /heartbeat` and renews it in a Lease; the
operator reads the Lease (`raftset.operator.members`). Both sides use these names.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from raftset import contract


def rfc3339(moment: datetime) -> str:
    """Lease times need microseconds (MicroTime) in UTC."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_manifest(
    *,
    namespace: str,
    cluster: str,
    pod: str,
    pod_uid: str | None,
    heartbeat: dict[str, Any],
    lease_seconds: int,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The Lease a member's sidecar applies on every change and slow refresh.

    Owned by the pod, so a pod that disappears without cleaning up takes its Lease along.
    """
    moment = now or datetime.now(timezone.utc)
    metadata: dict[str, Any] = {
        "name": contract.lease_name(pod),
        "namespace": namespace,
        "labels": {
            **contract.selector_labels(cluster),
            contract.LABEL_HEARTBEAT: "true",
            contract.LABEL_ROLE: str(heartbeat.get("role", contract.ROLE_UNKNOWN)),
        },
        "annotations": {contract.ANNOTATION_HEARTBEAT: json.dumps(heartbeat, sort_keys=True)},
    }
    if pod_uid:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": pod_uid}]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": pod,
            "leaseDurationSeconds": lease_seconds,
            "renewTime": rfc3339(moment),
        },
    }
