"""Backups and restore against real etcd members, real sidecars and a real S3 server (versitygw).

The cluster object (with spec.backup / spec.bootstrap.fromBackup) lives in the lab's real
kube-apiserver; no operator runs here: the sidecars read the object themselves, as in a pod,
and an on-demand backup is asked for as the operator asks it (request_backup: an id on the
backup Lease; tests/k8s/test_backup_status.py proves the operator moves backup-now there).
The credentials Secret's files are written where the pod would mount them (below the
sidecar's RAFTSET_BACKUP_MOUNT_ROOT), and RAFTSET_BACKUP_MOUNTS says so, as the operator renders it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families
from kubernetes import config as k8s_config

from raftset import backups, contract, objectstore, snapshots, times
from raftset.etcdclient import MemberClient
from raftset.objectstore import S3Settings, S3Store, StoreError
from tests.harness.checker import Writer, check
from tests.harness.lab import Lab, http_get
from tests.harness.operator import install_crds
from tests.harness.s3 import fresh_bucket
from tests.harness.scenarios import grow, restart_in_place
from tests.harness.waiting import wait_for
from tools.devcluster.s3 import S3Server

pytestmark = pytest.mark.etcd

PREFIX = "backups"


@pytest.fixture(scope="session")
def crds(kube_apiserver: Any) -> None:
    install_crds(kube_apiserver.kubeconfig)


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    return fresh_bucket(s3_server)


@pytest.fixture
def mounts(tmp_path: Path, s3_server: S3Server) -> Path:
    """What the pod's Secret volumes would hold: the S3 credentials, for backup and for restore."""
    root = tmp_path / "mounts"
    for where in (contract.BACKUP_CREDENTIALS_MOUNT, contract.RESTORE_CREDENTIALS_MOUNT):
        directory = root / where.lstrip("/")
        directory.mkdir(parents=True)
        (directory / contract.ACCESS_KEY_FILE).write_text(s3_server.access_key)
        (directory / contract.SECRET_KEY_FILE).write_text(s3_server.secret_key)
    return root


@pytest.fixture
def backup_lab(make_lab: Callable[..., Lab], mounts: Path, crds: None) -> Callable[..., Lab]:
    def make(replicas: int = 3) -> Lab:
        lab = make_lab(replicas=replicas, env_extra={
            contract.SidecarEnv.BACKUP_MOUNT_ROOT: str(mounts),
            # What the operator renders beside those volumes for s3_spec's Secret.
            contract.SidecarEnv.BACKUP_MOUNTS: backups.mounts({"s3": {"credentialsSecret": "s3-credentials"}}),
            contract.SidecarEnv.BACKUP_INTERVAL: "0.5",
        })
        return lab
    return make


def s3_spec(server: S3Server, bucket: str) -> dict[str, Any]:
    return {"endpoint": server.endpoint, "bucket": bucket, "prefix": PREFIX, "credentialsSecret": "s3-credentials"}


def store_of(server: S3Server, bucket: str) -> S3Store:
    return S3Store(S3Settings(server.endpoint, bucket, server.access_key, server.secret_key))


def custom(lab: Lab) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(k8s_config.new_client_from_config(config_file=lab.kubeconfig))


def create_cluster_object(lab: Lab, spec: dict[str, Any]) -> None:
    body = {"apiVersion": contract.API_VERSION, "kind": contract.KIND_ETCD,
            "metadata": {"name": lab.cluster}, "spec": {"replicas": 3, **spec}}
    custom(lab).create_namespaced_custom_object(contract.GROUP, contract.VERSION, lab.namespace,
                                                contract.PLURAL_ETCD, body)


def request_backup(lab: Lab) -> str:
    """What the operator does with a backup-now annotation (no operator runs here): a new request
    id on the backup Lease, applied server-side beside the record the sidecar owns there."""
    request = backups.request_id(datetime.now(timezone.utc))
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": contract.backup_lease_name(lab.cluster), "namespace": lab.namespace,
                         "labels": {**contract.selector_labels(lab.cluster), contract.LABEL_BACKUP: "true"},
                         "annotations": {contract.ANNOTATION_BACKUP_REQUEST: request}}}
    lab.coordination.patch_namespaced_lease(body["metadata"]["name"], lab.namespace, body,
                                            field_manager="raftset-operator", force=True,
                                            _content_type="application/apply-patch+yaml")
    return request


def backup_annotations(lab: Lab) -> dict[str, str]:
    try:
        lease = lab.coordination.read_namespaced_lease(contract.backup_lease_name(lab.cluster), lab.namespace)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    return lease.metadata.annotations or {}


def record(lab: Lab) -> backups.Record:
    return backups.Record.from_json(backup_annotations(lab).get(contract.ANNOTATION_BACKUP_RECORD))


def seed_record(lab: Lab, rec: backups.Record) -> None:
    """The backup Lease as a previous leader left it (its schedule anchor in the past)."""
    lab.coordination.create_namespaced_lease(lab.namespace, {
        "metadata": {"name": contract.backup_lease_name(lab.cluster),
                     "labels": {**contract.selector_labels(lab.cluster), contract.LABEL_BACKUP: "true"},
                     "annotations": {contract.ANNOTATION_BACKUP_RECORD: rec.to_json()}},
        "spec": {}})


def success_after(lab: Lab, previous: str | None) -> Callable[[], backups.Manifest | None]:
    def done() -> backups.Manifest | None:
        current = record(lab).last_success
        return current if current is not None and current.key != previous else None
    return done


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def published_keys(store: S3Store, lab: Lab) -> list[str]:
    prefix = backups.cluster_prefix(PREFIX, lab.namespace, lab.cluster)
    return [s.key for s in backups.published(store.keys(prefix))]


def latest(store: S3Store, lab: Lab) -> backups.Manifest | None:
    raw = store.get(backups.latest_key(PREFIX, lab.namespace, lab.cluster))
    return backups.Manifest.from_json(raw) if raw else None


async def three_writing(lab: Lab, at_least: int, timeout: float) -> Writer:
    """Three members and a writer on all of them that has `at_least` acknowledged writes."""
    await grow(lab, 3)
    writer = Writer([lab.pod(o).client_url for o in range(3)], lab.client_tls())
    writer.start()
    wait_for(lambda: writer.ok > at_least, timeout, "the writer running")
    return writer


async def test_scheduled_and_on_demand_backups_under_writes_are_verified_published_and_pruned(
        backup_lab: Callable[..., Lab], s3_server: S3Server, bucket: str) -> None:
    lab = backup_lab()
    writer = await three_writing(lab, 50, 30)
    # A schedule whose last run (per the Lease a previous leader wrote) is long past: due now.
    an_hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    seed_record(lab, backups.Record(since=times.rfc3339(an_hour_ago)))
    create_cluster_object(lab, {"backup": {"schedule": "*/30 * * * *", "retention": {"keep": 2},
                                           "s3": s3_spec(s3_server, bucket)}})
    store = store_of(s3_server, bucket)

    first = wait_for(success_after(lab, None), 60, "the scheduled backup")
    assert (times.parse_rfc3339(record(lab).since) or an_hour_ago) > an_hour_ago, "the schedule's anchor moved"
    keys = [first.key]
    for _ in range(2):  # two on-demand backups, writes still flowing
        request = request_backup(lab)
        taken = wait_for(success_after(lab, keys[-1]), 60, f"on-demand backup {request}")
        keys.append(taken.key)
        assert record(lab).request == request, "the record says which request it served"
        assert backup_annotations(lab)[contract.ANNOTATION_BACKUP_REQUEST] == request, \
            "the sidecar's record did not take the operator's request off the Lease"
    ok_before_stop = writer.ok
    writer.stop()
    assert writer.ok >= ok_before_stop > 50 and writer.longest_stall < 5.0, "backups stalled no write"

    last = record(lab).last_success
    assert last is not None and last.key == keys[-1] and last.revision > 0
    body = b"".join(store.read(last.key))
    assert (len(body), sha256(body)) == (last.size, last.sha256), "the stored object is the snapshot"
    assert latest(store, lab) == last, "latest names the newest verified backup"
    assert published_keys(store, lab) == sorted(keys[1:]), "retention (keep 2) removed the oldest"
    assert store.get(first.key) is None and store.get(backups.manifest_key(first.key)) is None
    assert record(lab).last_failure is None
    await check([lab.pod(o).client_url for o in range(3)], writer.acked, lab.client_tls())


async def test_the_leader_keeps_a_request_until_its_pod_mounts_the_destination(
        backup_lab: Callable[..., Lab], s3_server: S3Server, bucket: str) -> None:
    """spec.backup names a Secret this pod was not started with (its RAFTSET_BACKUP_MOUNTS names
    another, as before the operator's roll reaches it): no attempt, no record, the request stays on
    the Lease; restarted with the mount, as the roll restarts it, the member serves that request."""
    lab = backup_lab(replicas=1)
    await grow(lab, 1)
    spec = {"s3": {**s3_spec(s3_server, bucket), "credentialsSecret": "renamed"}}
    create_cluster_object(lab, {"backup": spec})
    request = request_backup(lab)
    pod = lab.pod(0)
    wait_for(lambda: "waiting for the roll onto the new pod template" in pod.log_text(), 30,
             "the sidecar saying why it takes no backup")
    assert record(lab) == backups.Record(), "nothing attempted, nothing recorded"
    assert backup_annotations(lab)[contract.ANNOTATION_BACKUP_REQUEST] == request, "the request stays"

    pod.env_extra[contract.SidecarEnv.BACKUP_MOUNTS] = backups.mounts(spec)
    await restart_in_place(lab, 0, voters=1)
    taken = wait_for(success_after(lab, None), 60, "the pending request served from the new pod")
    assert record(lab).request == request and record(lab).last_failure is None
    body = b"".join(store_of(s3_server, bucket).read(taken.key))
    assert (len(body), sha256(body)) == (taken.size, taken.sha256)


async def test_faults_leave_latest_alone_and_say_why(
        backup_lab: Callable[..., Lab], s3_server: S3Server, bucket: str, tmp_path: Path) -> None:
    """Wrong credentials, an unreachable endpoint, a missing bucket, an upload killed midway:
    each fails with its reason, "latest" still names the last good backup, no write stalls."""
    lab = backup_lab(replicas=1)
    await grow(lab, 1)
    async with MemberClient(lab.pod(0).client_url) as client:
        for i in range(40):  # a snapshot of a few MiB: more than one 5 MiB part
            await client.put(f"/big/{i:03d}", "x" * 200_000)
        target = snapshots.Target(PREFIX, lab.namespace, lab.cluster)
        good = store_of(s3_server, bucket)
        now = datetime.now(timezone.utc)
        published = await snapshots.take(client, good, target, "etcd", now, part_size=5 * 1024 * 1024)
        assert latest(good, lab) == published

        wrong = S3Store(S3Settings(s3_server.endpoint, bucket, s3_server.access_key, "not-the-secret"))
        unreachable = S3Store(S3Settings(f"http://{s3_server.host}:1", bucket, "a", "b"), connect_timeout=1)
        missing = store_of(s3_server, "no-such-bucket")
        for store, reason in ((wrong, backups.CREDENTIALS_REJECTED), (unreachable, backups.ENDPOINT_UNREACHABLE),
                              (missing, backups.BUCKET_MISSING)):
            with pytest.raises(StoreError) as failed:
                await snapshots.take(client, store, target, "etcd", now + timedelta(seconds=1))
            assert failed.value.reason == reason, failed.value

        # The upload killed midway: the server dies after the first part went in.
        class DiesAfterFirstPart:
            def __init__(self, inner: S3Store) -> None:
                self.inner = inner

            def begin(self, key: str) -> Any:
                upload = self.inner.begin(key)
                real_part = upload.part

                def part(data: bytes) -> None:
                    real_part(data)
                    s3_server.proc.popen.kill()  # SIGKILL: no goodbye to the client
                    s3_server.proc.popen.wait(10)
                upload.part = part  # type: ignore[method-assign]
                return upload

            def __getattr__(self, name: str) -> Any:
                return getattr(self.inner, name)

        with pytest.raises(StoreError) as killed:
            await snapshots.take(client, DiesAfterFirstPart(good), target, "etcd", now + timedelta(seconds=2),
                                 part_size=5 * 1024 * 1024)
        assert killed.value.reason == backups.ENDPOINT_UNREACHABLE, killed.value
        assert await client.put("/after/kill", "still serving") > 0

        # A full backup volume: the file being written is the kernel's /dev/full (ENOSPC).
        volume = objectstore.DirectoryStore(tmp_path / "volume")
        on_volume = await snapshots.take(client, volume, target, "etcd", now)
        revision, _ = await client.get_prefix(snapshots.REVISION_PROBE)
        later = now + timedelta(seconds=3)
        full = tmp_path / "volume" / (backups.snapshot_key(PREFIX, lab.namespace, lab.cluster, later, revision)
                                      + ".partial")
        full.symlink_to("/dev/full")
        with pytest.raises(StoreError) as no_space:
            await snapshots.take(client, volume, target, "etcd", later)
        assert no_space.value.reason == backups.DESTINATION_FULL, no_space.value
        assert volume.get(backups.latest_key(PREFIX, lab.namespace, lab.cluster)) == on_volume.to_json()
        assert not full.exists() and not full.is_symlink(), "the partial file is gone"
    restarted = restart(s3_server)
    store = store_of(restarted, bucket)
    assert latest(store, lab) == published, "latest still names the last verified backup"
    assert published_keys(store, lab) == [published.key], "nothing half-uploaded was published"


def restart(server: S3Server) -> S3Server:
    """The same versitygw again, on the same address and directory (it was killed by a test)."""
    from tools.devcluster import s3 as devs3

    fresh = devs3.start(server.root.parent, host=server.host, port=server.port,
                        access_key=server.access_key, secret_key=server.secret_key)
    server.proc, server.supervisor = fresh.proc, fresh.supervisor
    return server


async def test_a_missing_bucket_through_the_sidecar_is_recorded_with_its_reason(
        backup_lab: Callable[..., Lab], s3_server: S3Server) -> None:
    lab = backup_lab(replicas=1)
    await grow(lab, 1)
    create_cluster_object(lab, {"backup": {"s3": s3_spec(s3_server, "no-such-bucket")}})
    request_backup(lab)
    failure = wait_for(lambda: record(lab).last_failure, 60, "the failure recorded")
    assert failure.reason == backups.BUCKET_MISSING, failure
    assert backups.condition(record(lab), True)[:2] == ("False", backups.BUCKET_MISSING)
    text = http_get(f"{lab.pod(0).sidecar_url}/metrics")[1]
    outcomes = {s.labels["outcome"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "raftset_sidecar_outcomes_total" and s.labels.get("step") == "backup"}
    assert outcomes.get(backups.BUCKET_MISSING, 0) >= 1 and "taken" not in outcomes, outcomes
    await lab.put("/still", "serving")
    assert await lab.get("/still", 0, serializable=False) == b"serving"


async def test_restore_into_a_new_cluster_gives_every_acknowledged_write_and_the_same_hash(
        backup_lab: Callable[..., Lab], s3_server: S3Server, bucket: str) -> None:
    source = backup_lab()
    writer = (await three_writing(source, 200, 60)).stop()
    create_cluster_object(source, {"backup": {"s3": s3_spec(s3_server, bucket)}})
    request_backup(source)
    taken = wait_for(success_after(source, None), 60, "the backup")
    async with MemberClient(source.pod(0).client_url) as client:
        revision, _ = await client.get_prefix("/writer/")
        source_hash = await client.hash_kv(revision)

    target = backup_lab()
    create_cluster_object(target, {"bootstrap": {"fromBackup": {
        "backup": "latest", "cluster": source.cluster, "namespace": source.namespace,
        "s3": s3_spec(s3_server, bucket)}}})
    await grow(target, 3)
    assert f"restored {taken.key}" in target.pod(0).log_text()
    for ordinal in (1, 2):
        assert "join: add-learner" in target.pod(ordinal).log_text(), "the others join as learners"
    members = await target.members(0, 1, 2)
    assert {m.name for m in members} == {target.pod(o).name for o in range(3)}, "the new names"
    assert not {m.id for m in members} & {m.id for m in await source.members(0, 1, 2)}, "new member IDs"
    verdict = await check([target.pod(o).client_url for o in range(3)], writer.acked)
    assert verdict.acknowledged == len(writer.acked) > 200
    # The joins took the membership lock (a few writes) after the restore: compare at the
    # snapshot's revision, which every restored member holds.
    for ordinal in range(3):
        async with MemberClient(target.pod(ordinal).client_url) as client:
            restored = await client.hash_kv(revision)
        assert restored.hash == source_hash.hash, f"ordinal {ordinal}: HashKV at {revision} differs from the source's"


async def test_a_corrupt_or_missing_backup_starts_nothing_and_says_why(
        backup_lab: Callable[..., Lab], s3_server: S3Server, bucket: str) -> None:
    source = backup_lab(replicas=1)
    await grow(source, 1)
    await source.put("/k", "v")
    create_cluster_object(source, {"backup": {"s3": s3_spec(s3_server, bucket)}})
    request_backup(source)
    taken = wait_for(success_after(source, None), 60, "the backup")
    path = s3_server.object_path(bucket, taken.key)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle of the stored snapshot
    path.write_bytes(bytes(data))

    for name, backup, reason in (("corrupt", "latest", backups.CHECKSUM_MISMATCH),
                                 ("missing", f"{PREFIX}/nowhere/snapshot-20260101T000000Z-r1.db",
                                  backups.BACKUP_MISSING)):
        target = backup_lab(replicas=1)
        create_cluster_object(target, {"bootstrap": {"fromBackup": {
            "backup": backup, "cluster": source.cluster, "namespace": source.namespace,
            "s3": s3_spec(s3_server, bucket)}}})
        pod = target.pod(0)
        target.create_pod(0)
        pod.start_sidecar()

        def reported() -> dict[str, str] | None:
            raw = backup_annotations(target).get(contract.ANNOTATION_RESTORE_FAILURE)
            return json.loads(raw) if raw else None
        failure = wait_for(reported, 60, f"the {name} backup's restore failure")
        assert failure["reason"] == reason, (name, failure)
        assert not pod.startup_ok(), f"{name}: the store was allowed to start"
        assert not pod.data_dir.exists(), f"{name}: a half-restored data dir was left"
        assert not list(pod.data_dir.parent.glob("*.restoring")), name
