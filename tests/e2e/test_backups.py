"""Backups through the whole stack, on both workload backends (StatefulSet and Advanced
StatefulSet) and both engines: the operator mounts the credentials Secret into the pods, the
leader's real sidecar backs the real etcd (or Xline) up to the real S3 server (versitygw) when a
user annotates the cluster, and the operator shows the result in status.backup and BackupReady;
a new cluster with spec.bootstrap.fromBackup then starts from that backup.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import pytest

from raftset import backups, contract
from raftset.sidecar.io.objectstore import S3Settings, S3Store
from tests.harness.checker import Writer, check
from tests.harness import engines
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import Operator, kubectl, wait_for
from tests.harness.s3 import fresh_bucket
from tests.harness.view import ClusterView
from tools.devcluster.podrunner import PodRunner, pod_ip
from tools.devcluster.s3 import S3Server

pytestmark = pytest.mark.e2e

FAST = {"sidecar": {"heartbeatIntervalSeconds": 2, "cleanIntervalSeconds": 2, "cleanGracePeriodSeconds": 120}}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind), {})


# Both backends on the default etcd; Xline, whose initial members each restore, on one of them.
# etcd on the builtin StatefulSet is the real tier's: real pods, TLS, versitygw reached from the nodes
# (tests/real/test_operator_tls.py, backup and restore).
RESTORE_CASES = [(engines.DEFAULT, "AdvancedStatefulSet"), (engines.XLINE, "StatefulSet")]


@pytest.mark.parametrize(("engine", "backend"), RESTORE_CASES, ids=[f"{e.label}-{b}" for e, b in RESTORE_CASES])
def test_backup_now_lands_in_s3_and_status_and_a_new_cluster_restores_it(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, s3_server: S3Server,
        engine: EngineUnderTest, backend: str) -> None:
    engines.ready(engine)
    kind, short = engine.engine.kind, engine.engine.short_name
    kubeconfig = control_plane.kubeconfig
    bucket = fresh_bucket(s3_server)
    kubectl(kubeconfig, "create", "secret", "generic", "s3-credentials", "-n", namespace,
            f"--from-literal={contract.ACCESS_KEY_FILE}={s3_server.access_key}",
            f"--from-literal={contract.SECRET_KEY_FILE}={s3_server.secret_key}")
    kv = ClusterView(kubeconfig, kind, "kv", namespace, backend,
                     member_url=lambda o: f"http://{pod_ip(runner.addresses.prefix(namespace, 'kv'), o)}:2379")
    kv.create(3, backup={"s3": {"endpoint": s3_server.endpoint, "bucket": bucket, "prefix": "e2e",
                                "credentialsSecret": "s3-credentials"}}, version=engine.version, **FAST)
    kv.wait_healthy(0, 1, 2)
    assert condition(kv.obj(), "BackupReady")["reason"] == "NoBackupYet"
    writer = Writer([kv.member_url(o) for o in range(3)])
    writer.start()
    try:
        wait_for(lambda: writer.ok > 50, 30, "the writer running")
        kubectl(kubeconfig, "annotate", short, "kv", "-n", namespace, f"{contract.ANNOTATION_BACKUP_NOW}=true")
        done = wait_for(lambda: (o := kv.obj()) and (o["status"].get("backup") or {}).get("lastSuccess") and o,
                        120, "status.backup.lastSuccess")
    finally:
        writer.stop()
    assert writer.failed == 0 and writer.ok > 50
    success = done["status"]["backup"]["lastSuccess"]
    wait_for(lambda: condition(kv.obj(), "BackupReady").get("status") == "True", 60, "BackupReady=True")
    assert contract.ANNOTATION_BACKUP_NOW not in (kv.obj()["metadata"].get("annotations") or {})
    store = S3Store(S3Settings(s3_server.endpoint, bucket, s3_server.access_key, s3_server.secret_key))
    body = b"".join(store.read(success["key"]))
    assert (len(body), hashlib.sha256(body).hexdigest()) == (success["size"], success["sha256"])
    latest = backups.Manifest.from_json(store.get(backups.latest_key("e2e", namespace, "kv")) or b"")
    assert latest.key == success["key"]

    # A new cluster from that backup: etcd's first member restores it and the others join as
    # learners; each of Xline's initial members restores it (docs/backups.md).
    restored = ClusterView(kubeconfig, kind, "kv2", namespace, backend,
                           member_url=lambda o: f"http://{pod_ip(runner.addresses.prefix(namespace, 'kv2'), o)}:2379")
    restored.create(3, bootstrap={"fromBackup": {"backup": "latest", "cluster": "kv", "s3": {
        "endpoint": s3_server.endpoint, "bucket": bucket, "prefix": "e2e", "credentialsSecret": "s3-credentials"}}},
        version=engine.version, **FAST)
    restored.wait_healthy(0, 1, 2)
    # The manifest's revision was read before the snapshot streamed: every write acknowledged
    # at or below it is in the snapshot (later ones may be too; they are not required).
    in_snapshot = {k: a for k, a in writer.acked.items() if a.revision <= success["revision"]}
    verdict = asyncio.run(check([restored.member_url(o) for o in range(3)], in_snapshot))
    assert verdict.acknowledged == len(in_snapshot) > 50
    assert condition(restored.obj(), "Degraded")["status"] == "False"


# Claims of the plane's default StorageClass (a restarted member keeps its data and its ID), and
# the harness's default emptyDir (a restarted member comes back empty and joins again).
STORAGES = pytest.mark.parametrize("storage", [{"size": "1Gi"}, {"ephemeral": True}], ids=["claims", "ephemeral"])


@STORAGES
def test_backup_enabled_on_a_running_cluster_rolls_the_members_and_backup_now_succeeds(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, s3_server: S3Server,
        etcd: EngineUnderTest, storage: dict[str, Any]) -> None:
    """spec.backup added to a cluster that runs: its pods cannot grow the credentials volume in
    place, so the operator rolls them (followers first, the leader last) while writes flow, and a
    backup-now asked for at once is served by a leader whose pod mounts the credentials — no
    CredentialsRejected in between (before the fix the old leader, rolled last, spent the request
    on a pod without the mount)."""
    kubeconfig = control_plane.kubeconfig
    bucket = fresh_bucket(s3_server)
    kubectl(kubeconfig, "create", "secret", "generic", "s3-credentials", "-n", namespace,
            f"--from-literal={contract.ACCESS_KEY_FILE}={s3_server.access_key}",
            f"--from-literal={contract.SECRET_KEY_FILE}={s3_server.secret_key}")
    kv = ClusterView(kubeconfig, contract.KIND_ETCD, "kv", namespace,
                     member_url=lambda o: f"http://{pod_ip(runner.addresses.prefix(namespace, 'kv'), o)}:2379")
    kv.create(3, version=etcd.version, storage=storage, **FAST)
    kv.wait_healthy(0, 1, 2)
    ids = {m.name: m.id for m in kv.members(0, 1, 2)}
    before = {p.metadata.name: p.metadata.creation_timestamp for p in kv.pod_objects()}
    writer = Writer([kv.member_url(o) for o in range(3)])
    writer.start()
    try:
        wait_for(lambda: writer.ok > 50, 30, "the writer running")
        backup = {"s3": {"endpoint": s3_server.endpoint, "bucket": bucket, "prefix": "e2e",
                         "credentialsSecret": "s3-credentials"}}
        kubectl(kubeconfig, "patch", "etcdc", "kv", "-n", namespace, "--type=merge",
                "-p", json.dumps({"spec": {"backup": backup}}))
        kubectl(kubeconfig, "annotate", "etcdc", "kv", "-n", namespace, f"{contract.ANNOTATION_BACKUP_NOW}=true")
        done = wait_for(lambda: (o := kv.obj()) and (o["status"].get("backup") or {}).get("lastSuccess") and o,
                        240, "status.backup.lastSuccess after the roll")
        wait_for(lambda: all(p.metadata.creation_timestamp > before[p.metadata.name] for p in kv.pod_objects())
                 and len(kv.pod_objects()) == 3, 60, "every pod re-created with the credentials mounted")
        kv.wait_healthy(0, 1, 2)
    finally:
        writer.stop()
    print(f"writer: {writer.ok} ok, {writer.failed} failed, longest stall {writer.longest_stall:.3f}s")
    assert writer.failed == 0 and writer.ok > 50, writer.errors[-3:]
    assert writer.longest_stall < 10.0, f"writes stalled {writer.longest_stall:.2f}s through the roll"
    assert "lastFailure" not in done["status"]["backup"], done["status"]["backup"]
    assert condition(kv.obj(), "BackupReady")["status"] == "True"
    assert not [m for reason, m in kv.events() if reason == "BackupCredentialsRejected"], \
        "no false alarm while the members rolled"
    assert len([m for reason, m in kv.events() if reason == "RollingMember"]) == 3
    if not storage.get("ephemeral"):
        assert {m.name: m.id for m in kv.members(0, 1, 2)} == ids, "a restart keeps every member"
    success = done["status"]["backup"]["lastSuccess"]
    store = S3Store(S3Settings(s3_server.endpoint, bucket, s3_server.access_key, s3_server.secret_key))
    body = b"".join(store.read(success["key"]))
    assert (len(body), hashlib.sha256(body).hexdigest()) == (success["size"], success["sha256"])
    asyncio.run(check([kv.member_url(o) for o in range(3)], writer.acked))
