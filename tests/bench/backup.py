"""Backup and restore of a full store, with real members, real sidecars and a real S3 server.

A 3-member cluster (real etcd, real sidecars, the operator's default sidecar settings) is
filled to `data_mib` with large values through the normal client; then the bench load
(`load.py`) and the checker's writer run, a steady window is measured, and one backup goes
to versitygw through the product's own code (`raftset.sidecar.io.snapshots.take`: Maintenance.Snapshot
-> sha256 -> multipart upload -> read back and compare -> manifest -> "latest"), driven
directly so its seconds are the backup's alone (the sidecar adds up to its check interval).

The snapshot is then restored into a new 3-member cluster the product's way: the cluster
object names it in `spec.bootstrap.fromBackup`, the first pod's sidecar fetches it and
restores it with the engine's restore command (etcdutl), the others join as learners.
"writable" is the first put acknowledged by the restored cluster, "full" every member voting,
both timed from the first pod's start. The checker then reads back every acknowledged write
the snapshot holds, and every member's HashKV at the snapshot's revision must equal the source's.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from raftset import backups, contract
from raftset.sidecar.io import snapshots
from raftset.sidecar.io.etcdclient import ClientTLS, EtcdClientError, MemberClient
from raftset.sidecar.io.objectstore import S3Settings, S3Store
from tests.bench.labs import PRODUCT_DEFAULTS, grow
from tests.bench.load import Load
from tests.bench.stats import window_stats
from tests.harness.checker import Ack, Writer, check
from tests.harness.lab import Lab
from tests.harness.operator import install_crds
from tools.devcluster import s3

COLUMNS = ("data_mib", "snapshot_mib", "backup_s", "backup_mib_per_s", "steady_write_p99_ms",
           "backup_write_p99_ms", "backup_failed_writes", "restore_writable_s", "restore_full_s",
           "acked_in_snapshot", "acked_read_back", "hash_kv_equal", "load_1m")
VALUE_BYTES = 256 * 1024  # large values: the fill is quick and stays far below etcd's request limit
FILL_CONCURRENCY = 4
PREFIX = "backups"
TIMEOUT_S = 300.0
MIB = 1024 * 1024


def throughput_mib_s(size_bytes: int, seconds: float) -> float:
    """MiB per second of a transfer; 0.0 when it took no measurable time."""
    return round(size_bytes / MIB / seconds, 1) if seconds > 0 else 0.0


def acked_in_snapshot(acked: dict[str, Ack], revision: int) -> dict[str, Ack]:
    """The acknowledged writes a snapshot at `revision` holds (those at or below it)."""
    return {key: ack for key, ack in acked.items() if ack.revision <= revision}


async def _fill(lab: Lab, mib: int) -> None:
    count = mib * MIB // VALUE_BYTES
    async with MemberClient(lab.pod(0).client_url, lab.client_tls(), timeout=30) as c:
        async def worker(first: int) -> None:
            for i in range(first, count, FILL_CONCURRENCY):
                await c.put(f"/fill/{i:06d}", os.urandom(VALUE_BYTES))
        await asyncio.gather(*(worker(w) for w in range(FILL_CONCURRENCY)))


def _mounts(root: Path, server: s3.S3Server) -> None:
    """What the pod's Secret volumes would hold: the S3 credentials, for backup and for restore."""
    for where in (contract.BACKUP_CREDENTIALS_MOUNT, contract.RESTORE_CREDENTIALS_MOUNT):
        directory = root / where.lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / contract.ACCESS_KEY_FILE).write_text(server.access_key)
        (directory / contract.SECRET_KEY_FILE).write_text(server.secret_key)


def _lab(kubeconfig: str, work: Path, mounts: Path) -> Lab:
    return Lab(kubeconfig, work, replicas=3, env_extra={
        **PRODUCT_DEFAULTS,
        contract.SidecarEnv.BACKUP_MOUNT_ROOT: str(mounts),
        contract.SidecarEnv.BACKUP_MOUNTS: backups.mounts({"s3": {"credentialsSecret": "s3-credentials"}}),
    })


def _create_cluster_object(lab: Lab, spec: dict[str, Any]) -> None:
    body = {"apiVersion": contract.API_VERSION, "kind": contract.KIND_ETCD,
            "metadata": {"name": lab.cluster}, "spec": {"replicas": 3, **spec}}
    api = k8s.CustomObjectsApi(k8s_config.new_client_from_config(config_file=lab.kubeconfig))
    api.create_namespaced_custom_object(contract.GROUP, contract.VERSION, lab.namespace, contract.PLURAL_ETCD, body)


async def _writable(url: str, tls: ClientTLS | None) -> bool:
    try:
        async with MemberClient(url, tls, timeout=1) as c:
            await c.put("/bench/restore-probe", "1")
        return True
    except EtcdClientError:
        return False


async def measure(kubeconfig: str, work: Path, data_mib: int, steady_s: float,
                  log: Callable[[str], None] = print) -> dict[str, Any]:
    install_crds(kubeconfig)
    server = s3.start(work / "versitygw")
    mounts = work / "mounts"
    _mounts(mounts, server)
    bucket = f"raftset-bench-{os.getpid()}"
    server.create_bucket(bucket)
    s3_spec = {"endpoint": server.endpoint, "bucket": bucket, "prefix": PREFIX, "credentialsSecret": "s3-credentials"}
    store = S3Store(S3Settings(server.endpoint, bucket, server.access_key, server.secret_key))
    source = _lab(kubeconfig, work / "source", mounts)
    target: Lab | None = None
    try:
        await grow(source, 3)
        t = time.monotonic()
        await _fill(source, data_mib)
        log(f"  backup: filled {data_mib} MiB in {time.monotonic() - t:.0f}s")
        urls = [source.pod(o).client_url for o in range(3)]
        load = Load(urls, urls, source.client_tls())
        writer = Writer(urls, source.client_tls())
        load.start()
        writer.start()
        try:
            load.wait_writes(50)
            steady_start = time.monotonic()
            await asyncio.sleep(steady_s)
            began = time.monotonic()
            target_name = snapshots.Target(PREFIX, source.namespace, source.cluster)
            async with MemberClient(source.pod(0).client_url, source.client_tls(), timeout=TIMEOUT_S) as c:
                manifest = await snapshots.take(c, store, target_name, "etcd", datetime.now(timezone.utc))
            ended = time.monotonic()
        finally:
            observed = load.stop()
            writer.stop()
        load_1m = os.getloadavg()[0]
        steady = window_stats(observed.writes, (steady_start, began))
        during = window_stats(observed.writes, (began, ended))
        async with MemberClient(source.pod(0).client_url, source.client_tls()) as c:
            source_hash = await c.hash_kv(manifest.revision, timeout=TIMEOUT_S)
        log(f"  backup: {manifest.size / MIB:.0f} MiB in {ended - began:.1f}s, revision {manifest.revision}")

        target = _lab(kubeconfig, work / "target", mounts)
        _create_cluster_object(target, {"bootstrap": {"fromBackup": {
            "backup": "latest", "cluster": source.cluster, "namespace": source.namespace, "s3": s3_spec}}})
        started = time.monotonic()
        target.pod(0).start(timeout=TIMEOUT_S)
        first_url = target.pod(0).client_url
        deadline = time.monotonic() + TIMEOUT_S
        while not await _writable(first_url, target.client_tls()):
            if time.monotonic() > deadline:
                raise AssertionError(f"the restored member took no write in {TIMEOUT_S:.0f}s")
            await asyncio.sleep(0.05)
        writable = time.monotonic()
        target.pod(0).wait_ready(TIMEOUT_S)
        for ordinal in (1, 2):
            target.pod(ordinal).start(timeout=TIMEOUT_S)
            target.pod(ordinal).wait_ready(TIMEOUT_S)
        await target.wait_voting(3, TIMEOUT_S)
        full = time.monotonic()
        assert f"restored {manifest.key}" in target.pod(0).log_text(), "the first member restored the snapshot"
        kept = acked_in_snapshot(writer.acked, manifest.revision)
        verdict = await check([target.pod(o).client_url for o in range(3)], kept, target.client_tls())
        hashes = []
        for ordinal in range(3):
            async with MemberClient(target.pod(ordinal).client_url, target.client_tls()) as c:
                hashes.append((await c.hash_kv(manifest.revision, timeout=TIMEOUT_S)).hash)
    finally:
        if target is not None:
            target.close()
        source.close()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    backup_s = ended - began
    row = {"data_mib": data_mib, "snapshot_mib": round(manifest.size / MIB, 1), "backup_s": round(backup_s, 2),
           "backup_mib_per_s": throughput_mib_s(manifest.size, backup_s),
           "steady_write_p99_ms": round(steady.p99_ms, 1), "backup_write_p99_ms": round(during.p99_ms, 1),
           "backup_failed_writes": during.failed_writes,
           "restore_writable_s": round(writable - started, 2), "restore_full_s": round(full - started, 2),
           "acked_in_snapshot": len(kept), "acked_read_back": verdict.acknowledged,
           "hash_kv_equal": all(h == source_hash.hash for h in hashes), "load_1m": round(load_1m, 2)}
    log(f"  backup {data_mib} MiB: {row['backup_s']}s ({row['backup_mib_per_s']} MiB/s), write p99 "
        f"{row['backup_write_p99_ms']} ms (steady {row['steady_write_p99_ms']} ms); restore writable "
        f"{row['restore_writable_s']}s, full {row['restore_full_s']}s, read back {row['acked_read_back']}/"
        f"{row['acked_in_snapshot']}, HashKV equal {row['hash_kv_equal']}")
    return row
