"""The operator's half of backups against a real kube-apiserver.

The sidecar's API calls (read the cluster object and the request on the backup Lease, publish
the record there) are made with the sidecar's own client, authenticated as the member
ServiceAccount under the Role the operator rendered: so the Role is proven sufficient, and it
cannot patch the cluster object. The operator must move a backup-now annotation to a request
id on the backup Lease and off the cluster object, and turn the record into status.backup,
BackupReady and one Event per failure.
(tests/etcd/test_backups.py runs the real backups and restores.)
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from kubernetes import client

from raftset import backups, contract
from raftset.backups import Failure, Manifest, Record
from raftset.sidecar.pure import leases
from raftset.sidecar.pure import heartbeat
from raftset.sidecar.io.kube import SidecarKube, KubeError, from_kubeconfig
from tests.harness.operator import Operator, api, kubectl, wait_for
from tests.harness.objects import condition, create

pytestmark = pytest.mark.k8s

S3 = {"endpoint": "http://127.0.0.1:1", "bucket": "bkt", "credentialsSecret": "s3-credentials"}


def record_lease(name: str, namespace: str, record: Record) -> dict[str, Any]:
    """The backup Lease exactly as the sidecar's BackupShell.publish writes it."""
    return leases.lease(
        contract.backup_lease_name(name), namespace,
        labels={**contract.selector_labels(name), contract.LABEL_BACKUP: "true"},
        annotations={contract.ANNOTATION_BACKUP_RECORD: record.to_json()},
        holder=contract.pod_name(name, 0), duration=30, renew_time=heartbeat.rfc3339(datetime.now(timezone.utc)),
        owner=None)


async def test_the_record_becomes_status_backup_ready_and_events(kube_apiserver: Any, bare_operator: Operator,
                                                                 namespace: str) -> None:
    kubeconfig = kube_apiserver.kubeconfig
    create(kubeconfig, "EtcdCluster", "bk", namespace, workloadKind="StatefulSet",
           backup={"schedule": "@daily", "s3": S3})
    custom = client.CustomObjectsApi(api(kubeconfig))

    def obj() -> dict[str, Any]:
        return custom.get_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters", "bk")

    first = wait_for(lambda: (o := obj()) and condition(o, "BackupReady") and o, 30, "BackupReady")
    assert condition(first, "BackupReady")["reason"] == "NoBackupYet"
    rbac = client.RbacAuthorizationV1Api(api(kubeconfig))
    wait_for(lambda: rbac.read_namespaced_role_binding("bk-member", namespace), 30, "the member Role")
    member = kube_apiserver.token_kubeconfig(namespace, "bk-member")
    kube = SidecarKube(from_kubeconfig(member), namespace)
    try:
        seen = await kube.cluster_object(contract.PLURAL_ETCD, "bk")
        assert seen is not None and seen["spec"]["backup"]["schedule"] == "@daily"
        with pytest.raises(KubeError) as refused:
            await kube.request("PATCH", f"/apis/{contract.API_VERSION}/namespaces/{namespace}/etcdclusters/bk",
                               {"metadata": {"annotations": {contract.ANNOTATION_BACKUP_NOW: None}}},
                               content_type="application/merge-patch+json")
        assert refused.value.status == 403, "a member cannot write its cluster object"

        kubectl(kubeconfig, "annotate", "etcdc", "bk", "-n", namespace, f"{contract.ANNOTATION_BACKUP_NOW}=true")

        coordination = client.CoordinationV1Api(api(kubeconfig))

        def pending() -> str | None:
            try:
                lease = coordination.read_namespaced_lease(contract.backup_lease_name("bk"), namespace)
            except client.ApiException:
                return None
            return (lease.metadata.annotations or {}).get(contract.ANNOTATION_BACKUP_REQUEST)

        async def requested() -> str | None:  # as the sidecar reads it
            lease = await kube.lease(contract.backup_lease_name("bk"))
            return (((lease or {}).get("metadata") or {}).get("annotations") or {}).get(
                contract.ANNOTATION_BACKUP_REQUEST)

        request = wait_for(pending, 30, "the request on the backup Lease")
        wait_for(lambda: contract.ANNOTATION_BACKUP_NOW not in (obj()["metadata"].get("annotations") or {}), 30,
                 "the operator removed backup-now from the cluster object")

        taken = Manifest(key="ns/bk/snapshot-20261123T080000Z-r12.db", sha256="ef" * 32, size=4096, revision=12,
                         taken="2026-11-23T08:00:00Z", engine="etcd", cluster="bk", namespace=namespace)
        await kube.apply_lease(record_lease("bk", namespace, Record(request=request, last_success=taken)))
        assert await requested() == request, "the sidecar's record leaves the operator's request on the Lease"
        kubectl(kubeconfig, "annotate", "etcdc", "bk", "-n", namespace, f"{contract.ANNOTATION_BACKUP_NOW}=again")
        wait_for(lambda: (r := pending()) != request and r, 30, "the same value asked again: a new request")
        wait_for(lambda: contract.ANNOTATION_BACKUP_NOW not in (obj()["metadata"].get("annotations") or {}), 30,
                 "the second backup-now removed too")

        done = wait_for(lambda: (o := obj()) and (o["status"].get("backup") or {}).get("lastSuccess") and o, 30,
                        "status.backup.lastSuccess")
        assert done["status"]["backup"]["lastSuccess"] == {"time": "2026-11-23T08:00:00Z", "revision": 12,
                                                           "size": 4096, "key": taken.key, "sha256": "ef" * 32}
        assert condition(done, "BackupReady")["status"] == "True"

        failure = Failure("2026-11-23T09:00:00Z", backups.BUCKET_MISSING, "NoSuchBucket: gone")
        await kube.apply_lease(record_lease("bk", namespace, Record(last_success=taken, last_failure=failure)))
    finally:
        await kube.close()
    failed = wait_for(lambda: (o := obj()) and condition(o, "BackupReady").get("status") == "False" and o, 30,
                      "BackupReady=False")
    assert condition(failed, "BackupReady")["reason"] == backups.BUCKET_MISSING
    assert failed["status"]["backup"]["lastFailure"]["reason"] == backups.BUCKET_MISSING
    assert condition(failed, "Degraded")["status"] == "False", "a failed backup does not degrade the cluster"
    core = client.CoreV1Api(api(kubeconfig))

    def events() -> list[Any]:
        return [e for e in core.list_namespaced_event(namespace, field_selector="involvedObject.name=bk").items
                if e.reason == "BackupBucketMissing"]
    (event,) = wait_for(events, 30, "the failure's Event")
    assert event.type == "Warning" and "NoSuchBucket" in event.message


async def test_the_first_member_to_restore_pins_the_snapshot_for_the_others(kube_apiserver: Any,
                                                                           bare_operator: Operator,
                                                                           namespace: str) -> None:
    """Where every initial member restores (Xline), `latest` may move between their reads: the restore
    Lease, claimed under the member Role by server-side apply that is never forced, keeps the first
    member's key, refuses another, and lets its claimant (or a member naming the same key) claim again."""
    kubeconfig = kube_apiserver.kubeconfig
    create(kubeconfig, "XlineCluster", "rs", namespace, workloadKind="StatefulSet")
    rbac = client.RbacAuthorizationV1Api(api(kubeconfig))
    wait_for(lambda: rbac.read_namespaced_role_binding("rs-member", namespace), 30, "the member Role")
    kube = SidecarKube(from_kubeconfig(kube_apiserver.token_kubeconfig(namespace, "rs-member")), namespace)

    def pin(key: str) -> dict[str, Any]:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": contract.restore_lease_name("rs"), "namespace": namespace,
                             "annotations": {contract.ANNOTATION_RESTORE_SOURCE: key}}, "spec": {}}

    first, moved = "ns/rs/snapshot-20261123T080000Z-r12.db", "ns/rs/snapshot-20261123T090000Z-r40.db"
    try:
        assert await kube.claim_lease(pin(first), "rs-1")
        assert not await kube.claim_lease(pin(moved), "rs-0"), "a second key must not replace the first"
        assert await kube.claim_lease(pin(first), "rs-2"), "the same key is no conflict"
        assert await kube.claim_lease(pin(first), "rs-1"), "a claimant's retry"
        lease = await kube.lease(contract.restore_lease_name("rs"))
        assert lease is not None
        assert lease["metadata"]["annotations"][contract.ANNOTATION_RESTORE_SOURCE] == first
    finally:
        await kube.close()
