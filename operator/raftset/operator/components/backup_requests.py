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

from kubernetes.client.exceptions import ApiException

from raftset import backups, contract
from raftset.operator.components.protocol import Owned, Round
from raftset.operator.io.api import KubeAPI
from raftset.operator.io.kube import api_error_message
from raftset.operator.pure import backup_status
from raftset.operator.pure.events import Event
from raftset.operator.pure.spec import Cluster

log = logging.getLogger("raftset.operator")


def _annotations(obj: Mapping[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def backup_request_lease(cluster: Cluster, request: str) -> dict[str, Any]:
    """The backup Lease with only the operator's field: the on-demand request id the leader's
    sidecar serves (server-side apply keeps the record the sidecar owns on the same Lease)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": contract.backup_lease_name(cluster.name),
            "namespace": cluster.namespace,
            "labels": {**contract.selector_labels(cluster.name), contract.LABEL_BACKUP: "true"},
            "annotations": {contract.ANNOTATION_BACKUP_REQUEST: request},
            "ownerReferences": [cluster.owner_reference],
        },
    }



class BackupRequests(Owned):
    """The backup-now annotation, taken as a request id on the backup Lease (the Lease is owned)."""

    name = "backup-requests"
    after_failure = True  # the request does not wait for the members' objects

    async def sync(self, kube: KubeAPI, current: Round) -> Round:
        if contract.ANNOTATION_BACKUP_NOW not in _annotations(current.body):
            return current
        cluster = current.cluster
        try:
            intake = await _decide(kube, cluster, current.now)
            if intake.record is not None:
                await kube.apply(backup_request_lease(cluster, intake.record))
        except ApiException as error:  # the annotation stays: the next reconcile tries again
            log.warning("backup-now on %s/%s not taken yet: %s", cluster.namespace, cluster.name,
                        api_error_message(error))
            return current
        if intake.record is not None:
            current = current.told(Event(
                "Normal", "BackupRequested",
                f"backup-now taken as request {intake.record}; the leader's sidecar takes the backup"))
        if intake.clear:
            current = current.dropping(contract.ANNOTATION_BACKUP_NOW)
        return current


async def _decide(kube: KubeAPI, cluster: Cluster, now: datetime) -> backups.Intake:
    current = await kube.get(contract.API_VERSION, cluster.engine.kind, cluster.namespace, cluster.name)
    lease = _annotations(await kube.get("coordination.k8s.io/v1", "Lease", cluster.namespace,
                                        contract.backup_lease_name(cluster.name)))
    served = backup_status.record(lease)
    return backups.intake(_annotations(current).get(contract.ANNOTATION_BACKUP_NOW), bool(cluster.backup),
                          lease.get(contract.ANNOTATION_BACKUP_REQUEST), served.request if served else "", now)
