"""Why members are missing, from what the API says now: a few lists, only while a member is missing.

The cause itself is named by pure.diagnosis.diagnose.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from raftset import contract
from raftset.operator.io.api import KubeAPI
from raftset.operator.pure.diagnosis import Problem, diagnose, pending_claims, silent_pods
from raftset.operator.pure.heartbeats import HeartbeatRecord

log = logging.getLogger("raftset.operator.pure.diagnosis")


async def find_cause(kube: KubeAPI, cluster: Any, missing: Sequence[int], heartbeats: Sequence[HeartbeatRecord],
                     now: datetime) -> Problem | None:
    """`diagnose` over what the API says now; `cluster` is a `spec.Cluster`. Best effort: an
    API error (an older install's RBAC without these reads) names no cause rather than failing."""
    if not missing:
        return None
    selector = contract.label_selector(cluster.name)
    try:
        pods = await kube.list("v1", "Pod", cluster.namespace, selector)
        pvcs: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        classes: list[dict[str, Any]] = []
        if not cluster.storage.ephemeral:
            pvcs = await kube.list("v1", "PersistentVolumeClaim", cluster.namespace, selector)
            if pending_claims(cluster.name, missing, pvcs):
                events = await kube.list("v1", "Event", cluster.namespace, "",
                                         fields="involvedObject.kind=PersistentVolumeClaim")
                classes = await kube.list("storage.k8s.io/v1", "StorageClass", None, "")
        if silent_pods(cluster.name, missing, pods, heartbeats, now):
            events += await kube.list("v1", "Event", cluster.namespace, "",
                                      fields="involvedObject.kind=Pod,type=Warning")
    except ApiException as error:
        log.info("no cause named for %s/%s: %s", cluster.namespace, cluster.name, error.reason)
        return None
    return diagnose(cluster.name, missing, storage_class=cluster.storage.storage_class,
                    ephemeral=cluster.storage.ephemeral, pvcs=pvcs, events=events, classes=classes, pods=pods,
                    heartbeats=heartbeats, store=cluster.engine.name, now=now)
