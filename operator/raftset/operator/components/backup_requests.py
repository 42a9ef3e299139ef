"""The operator takes a backup-now request off the cluster object (docs/backups.md).

Why the operator and not the sidecar: removing the annotation means patching the cluster
object, and a member allowed to patch it could change its spec (image, replicas, options)
on every member. The operator already writes the cluster object; the members only `get` it.

The request becomes an id on the backup Lease (written first), then the annotation is removed
in this reconcile's kopf patch; the decision is raftset.backups.intake. Runs only while the
annotation is there, and then reads the cluster object and the Lease from the apiserver, not
from caches that may trail the previous reconcile's own writes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from raftset import backups, contract
from raftset.operator.pure import manifests
from raftset.operator.pure import backup_status
from raftset.operator.io.kube import KubeClient, api_error_message
from raftset.operator.pure.spec import Cluster

log = logging.getLogger("raftset.operator")


def _annotations(obj: Mapping[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


async def take(kube: KubeClient, body: kopf.Body, cluster: Cluster, patch: kopf.Patch, now: datetime) -> None:
    if contract.ANNOTATION_BACKUP_NOW not in body.metadata.annotations:
        return
    try:
        step = await _decide(kube, cluster, now)
        if step.record is not None:
            await kube.apply(manifests.backup_request_lease(cluster, step.record))
    except ApiException as error:  # the annotation stays: the next reconcile tries again
        log.warning("backup-now on %s/%s not taken yet: %s", cluster.namespace, cluster.name,
                    api_error_message(error))
        return
    if step.record is not None:
        kopf.event(body, type="Normal", reason="BackupRequested",
                   message=f"backup-now taken as request {step.record}; the leader's sidecar takes the backup")
    if step.clear:
        patch.metadata.annotations[contract.ANNOTATION_BACKUP_NOW] = None


async def _decide(kube: KubeClient, cluster: Cluster, now: datetime) -> backups.Intake:
    current = await kube.get(contract.API_VERSION, cluster.engine.kind, cluster.namespace, cluster.name)
    lease = _annotations(await kube.get("coordination.k8s.io/v1", "Lease", cluster.namespace,
                                        contract.backup_lease_name(cluster.name)))
    served = backup_status.record(lease)
    return backups.intake(_annotations(current).get(contract.ANNOTATION_BACKUP_NOW), bool(cluster.backup),
                          lease.get(contract.ANNOTATION_BACKUP_REQUEST), served.request if served else "", now)
