"""Where a restore reads from, and the one backup Lease the backup and restore shells both write."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from raftset import backups, contract
from raftset.sidecar.pure import config
from raftset.sidecar.pure.backup import backup_lease, destination, restore_destination
from tests.unit.test_sidecar_config import ENV

pytestmark = pytest.mark.unit

ROOT = "/mnt"
S3 = {"endpoint": "https://s3.example/", "bucket": "b", "prefix": "p", "caSecret": {"name": "ca"}}
BACKUP = {"s3": S3}


def test_a_source_without_its_own_destination_reads_spec_backups() -> None:
    got = restore_destination(ROOT, {"backup": "latest"}, BACKUP)
    assert got == destination(ROOT, BACKUP)
    assert got.credentials_dir == ROOT + contract.BACKUP_CREDENTIALS_MOUNT
    assert got.ca_file == f"{ROOT}{contract.BACKUP_CA_MOUNT}/ca.crt"


def test_a_source_with_its_own_destination_reads_it_from_the_restore_mounts() -> None:
    s3 = restore_destination(ROOT, {"backup": "latest", "s3": {**S3, "bucket": "other"}}, BACKUP)
    assert (s3.bucket, s3.endpoint) == ("other", "https://s3.example")
    assert s3.credentials_dir == ROOT + contract.RESTORE_CREDENTIALS_MOUNT
    assert s3.ca_file == f"{ROOT}{contract.RESTORE_CA_MOUNT}/ca.crt"
    pvc = restore_destination(ROOT, {"backup": "latest", "pvc": {"claimName": "c", "prefix": "x"}}, BACKUP)
    assert (pvc.path, pvc.prefix) == (ROOT + contract.RESTORE_VOLUME_MOUNT, "x")


def test_no_destination_anywhere_is_a_config_error() -> None:
    with pytest.raises(backups.ConfigError):
        restore_destination(ROOT, {"backup": "latest"}, {})


def test_the_backup_lease_is_the_clusters_held_by_this_pod_and_owned_by_the_workload() -> None:
    settings = config.parse([], ENV)
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "demo", "uid": "u"}
    body = backup_lease(settings, {contract.ANNOTATION_BACKUP_RECORD: "{}"}, datetime(2026, 1, 2, tzinfo=timezone.utc),
                        owner)
    meta = body["metadata"]
    assert (meta["name"], meta["namespace"]) == (contract.backup_lease_name("demo"), "ns")
    assert meta["labels"] == {**contract.selector_labels("demo"), contract.LABEL_BACKUP: "true"}
    assert meta["annotations"] == {contract.ANNOTATION_BACKUP_RECORD: "{}"}
    assert meta["ownerReferences"] == [owner]
    assert body["spec"]["holderIdentity"] == "demo-3"
    assert body["spec"]["leaseDurationSeconds"] == settings.lease_duration == max(1, round(3 * settings.heartbeat_interval))
    assert body["spec"]["renewTime"].startswith("2026-01-02T00:00:00")
