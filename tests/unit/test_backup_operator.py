"""The operator's side of backups: spec parsing, the pods' mounts and Role, status.backup,
BackupReady, the restore's Degraded reason and the Events."""

from __future__ import annotations

import json
from typing import Any

import pytest

from raftset import backups, contract
from raftset.backups import Failure, Manifest, Record
from raftset.operator.components.member_rbac import member_rbac
from raftset.operator.pure.pod_template import pod_template
from raftset.operator.pure import backup_status
from raftset.operator.pure import status
from raftset.operator.pure import spec
from raftset.operator.pure.planner import Plan
from tests.unit.builders import NOW, cluster, members

pytestmark = pytest.mark.unit

S3 = {"endpoint": "https://s3.example.com", "bucket": "etcd-backups", "credentialsSecret": "s3-credentials"}


def manifest(taken: str = "2026-01-01T11:00:00Z") -> Manifest:
    return Manifest(key="p/ns/demo/snapshot-20260101T110000Z-r9.db", sha256="cd" * 32, size=99, revision=9,
                    taken=taken, engine="etcd", cluster="demo", namespace="ns")


def lease_annotations(rec: Record | None = None, restore_failure: dict[str, str] | None = None) -> dict[str, str]:
    out = {}
    if rec is not None:
        out[contract.ANNOTATION_BACKUP_RECORD] = rec.to_json()
    if restore_failure is not None:
        out[contract.ANNOTATION_RESTORE_FAILURE] = json.dumps(restore_failure)
    return out


# ---- spec


def test_xline_keeps_a_restore_as_written() -> None:
    c = cluster(contract.KIND_XLINE, bootstrap={"fromBackup": {"backup": "latest", "s3": S3}})
    assert c.from_backup == {"backup": "latest", "s3": S3}


def test_etcd_keeps_backup_and_restore_as_written() -> None:
    c = cluster(backup={"s3": S3, "schedule": "@daily"}, bootstrap={"fromBackup": {"backup": "latest"}})
    assert c.backup == {"s3": S3, "schedule": "@daily"}
    assert c.from_backup == {"backup": "latest"}
    assert cluster().backup is None and cluster().from_backup is None


# ---- the pod template and the Role


def template(c: spec.Cluster) -> dict[str, Any]:
    return pod_template(c)


def test_no_backup_no_volumes() -> None:
    t = template(cluster())
    assert not [v for v in t["spec"]["volumes"] if v["name"].startswith(("backup", "restore"))]


def test_s3_credentials_and_ca_are_optional_secret_volumes_in_the_sidecar_only() -> None:
    c = cluster(backup={"s3": {**S3, "caSecret": {"name": "s3-ca", "key": "bundle.pem"}}})
    t = template(c)
    volumes = {v["name"]: v for v in t["spec"]["volumes"]}
    assert volumes["backup-credentials"]["secret"]["secretName"] == "s3-credentials"
    assert volumes["backup-credentials"]["secret"]["optional"] is True, "a missing Secret must not stop the pod"
    assert {i["key"] for i in volumes["backup-credentials"]["secret"]["items"]} == {
        contract.ACCESS_KEY_FILE, contract.SECRET_KEY_FILE}
    assert volumes["backup-ca"]["secret"]["items"] == [{"key": "bundle.pem", "path": "bundle.pem"}]
    (side,) = t["spec"]["initContainers"]
    mounts = {m["name"]: m["mountPath"] for m in side["volumeMounts"]}
    assert mounts["backup-credentials"] == contract.BACKUP_CREDENTIALS_MOUNT
    assert mounts["backup-ca"] == contract.BACKUP_CA_MOUNT
    (store,) = t["spec"]["containers"]
    assert not [m for m in store["volumeMounts"] if m["name"].startswith("backup")], "the store never sees them"


def test_pvc_destination_and_a_restore_source() -> None:
    c = cluster(backup={"pvc": {"claimName": "etcd-backups"}},
                bootstrap={"fromBackup": {"backup": "latest", "s3": S3}})
    t = template(c)
    volumes = {v["name"]: v for v in t["spec"]["volumes"]}
    assert volumes["backup-volume"]["persistentVolumeClaim"] == {"claimName": "etcd-backups"}
    assert volumes["restore-credentials"]["secret"]["secretName"] == "s3-credentials"
    (side,) = t["spec"]["initContainers"]
    mounts = {m["name"]: m["mountPath"] for m in side["volumeMounts"]}
    assert mounts["backup-volume"] == contract.BACKUP_VOLUME_MOUNT
    assert mounts["restore-credentials"] == contract.RESTORE_CREDENTIALS_MOUNT


def test_the_member_role_reads_the_cluster_object_and_writes_the_backup_lease() -> None:
    c = cluster()
    role = next(o for o in member_rbac(c) if o["kind"] == "Role")
    leases = next(r for r in role["rules"] if r.get("resourceNames") and r["resources"] == ["leases"])
    assert contract.backup_lease_name("demo") in leases["resourceNames"]
    own = next(r for r in role["rules"] if r["apiGroups"] == [contract.GROUP])
    assert own == {"apiGroups": [contract.GROUP], "resources": [contract.PLURAL_ETCD], "resourceNames": ["demo"],
                   "verbs": ["get"]}, "read only: the operator takes backup-now off the cluster object"


# ---- status


def full_status(c: spec.Cluster, annotations: dict[str, str] | None, old: dict[str, Any] | None = None,
                problem: tuple[str, str] | None = None) -> dict[str, Any]:
    plan = Plan(replicas=3, reserved=(), action="steady", message="")
    return status.status(c, plan, None, members(range(3), 0), old or {}, 1, NOW, problem, backup=annotations)


def conditions(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in st["conditions"]}


def test_no_backup_configured_no_backup_status() -> None:
    st = full_status(cluster(), None)
    assert "backup" not in st and "BackupReady" not in conditions(st)


def test_backup_status_and_ready() -> None:
    c = cluster(backup={"s3": S3})
    before = full_status(c, None)
    assert before["backup"] == {}
    assert conditions(before)["BackupReady"]["reason"] == "NoBackupYet"
    ok = full_status(c, lease_annotations(Record(last_success=manifest())))
    assert ok["backup"]["lastSuccess"]["key"] == manifest().key
    assert conditions(ok)["BackupReady"]["status"] == "True"
    failed = full_status(c, lease_annotations(Record(
        last_success=manifest(), last_failure=Failure("2026-01-01T11:30:00Z", backups.ENDPOINT_UNREACHABLE, "down"))))
    ready = conditions(failed)["BackupReady"]
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", backups.ENDPOINT_UNREACHABLE, "down")
    assert conditions(failed)["Degraded"]["status"] == "False", "a failed backup does not degrade the cluster"
    swept = full_status(c, lease_annotations(Record(last_success=manifest(), aborted_uploads=2)))
    assert swept["backup"]["abortedUploads"] == 2 and "abortedUploads" not in ok["backup"]
    assert conditions(swept)["BackupReady"]["status"] == "True", "an aborted leftover is no failure"


def test_a_schedule_the_crd_let_through_is_invalid_config() -> None:
    st = full_status(cluster(backup={"s3": S3, "schedule": "61 * * * *"}), None)
    assert conditions(st)["BackupReady"]["reason"] == backups.INVALID_CONFIG


def test_an_abort_age_below_the_floor_is_invalid_config() -> None:
    """What the CRD's CEL rule refuses, on a cluster stored before the rule existed."""
    st = full_status(cluster(backup={"s3": S3, "retention": {"abortIncompleteUploadsAfter": "10m"}}), None)
    ready = conditions(st)["BackupReady"]
    assert (ready["reason"], "at least 1h" in ready["message"]) == (backups.INVALID_CONFIG, True)


def test_one_event_per_new_failure() -> None:
    c = cluster(backup={"s3": S3})
    failure = Failure("2026-01-01T11:30:00Z", backups.CREDENTIALS_REJECTED, "InvalidAccessKeyId: nope")
    old = full_status(c, lease_annotations(Record(last_success=manifest())))
    new = full_status(c, lease_annotations(Record(last_success=manifest(), last_failure=failure)), old)
    events = status.announcements(old, new)
    assert ("Warning", "BackupCredentialsRejected",
            "backup failed at 2026-01-01T11:30:00Z: InvalidAccessKeyId: nope") in events
    assert not [e for e in status.announcements(new, new) if e[1].startswith("Backup")], "announced once"


def backup_events(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [e for e in status.announcements(old, new) if e[1].startswith("Backup")]


def test_failures_that_came_and_went_between_two_reconciles_are_counted_in_the_next_event() -> None:
    c = cluster(backup={"s3": S3})
    first = backups.failed(Record(last_success=manifest()), NOW, backups.ENDPOINT_UNREACHABLE, "503 Slow Down")
    old = full_status(c, lease_annotations(first))
    later = first
    for _ in range(3):  # three more failed attempts; the operator looks again only after the third
        later = backups.failed(later, NOW, backups.ENDPOINT_UNREACHABLE, "503 Slow Down again")
    new = full_status(c, lease_annotations(later), old)
    assert new["backup"]["failures"] == 4
    [(_, _, message)] = backup_events(old, new)
    assert message.endswith("503 Slow Down again (2 earlier failures since the last one told)"), message
    assert backup_events(new, new) == []
    # The first failures of a cluster, all between two reconciles: the earlier ones counted from none.
    fresh = full_status(c, lease_annotations(Record(last_success=manifest())))
    [(_, _, message)] = backup_events(fresh, full_status(c, lease_annotations(later), fresh))
    assert message.endswith("(3 earlier failures since the last one told)"), message
    # One new failure: no count; a status from before failures were counted cannot tell how many came between.
    one = backups.failed(first, NOW, backups.ENDPOINT_UNREACHABLE, "once more")
    [(_, _, message)] = backup_events(old, full_status(c, lease_annotations(one), old))
    assert message.endswith("once more"), message
    legacy = {**old, "backup": {k: v for k, v in old["backup"].items() if k != "failures"}}
    [(_, _, message)] = backup_events(legacy, new)
    assert message.endswith("503 Slow Down again"), message


def test_a_failed_restore_degrades_the_cluster_with_its_reason() -> None:
    c = cluster(bootstrap={"fromBackup": {"backup": "latest", "s3": S3}})
    failure = {"time": "2026-01-01T11:30:00Z", "reason": backups.CHECKSUM_MISMATCH, "message": "sha256 differs"}
    st = full_status(c, lease_annotations(restore_failure=failure))
    degraded = conditions(st)["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", backups.CHECKSUM_MISMATCH)
    assert "sha256 differs" in degraded["message"] and "no member has started" in degraded["message"]
    # A problem of the spec itself still wins; without fromBackup the annotation means nothing.
    assert conditions(full_status(c, lease_annotations(restore_failure=failure), problem=("X", "y")))[
        "Degraded"]["reason"] == "X"
    assert conditions(full_status(cluster(), lease_annotations(restore_failure=failure)))[
        "Degraded"]["status"] == "False"


def test_an_unreadable_restore_report_still_degrades() -> None:
    c = cluster(bootstrap={"fromBackup": {"backup": "latest", "s3": S3}})
    assert backup_status.restore_problem(c, {contract.ANNOTATION_RESTORE_FAILURE: "garbage"})[0] == \
        backups.RESTORE_FAILED


def sidecar_env(c: spec.Cluster) -> dict[str, str]:
    (side,) = template(c)["spec"]["initContainers"]
    return {e["name"]: e.get("value", "") for e in side["env"]}


def test_the_template_changes_exactly_when_the_destinations_volumes_do() -> None:
    """The members roll onto a new template (raftset.operator.pure.rolls) for a new Secret or claim, as a
    pod's volumes are fixed at its creation; never for what the sidecar reads each round."""
    base = template(cluster(backup={"s3": S3}))
    assert base != template(cluster()), "enabling spec.backup rolls the members"
    for unchanged in ({"bucket": "other"}, {"endpoint": "https://elsewhere"}, {"prefix": "p"}):
        assert template(cluster(backup={"s3": {**S3, **unchanged}, "schedule": "@daily",
                                        "retention": {"keep": 3}})) == base, unchanged
    for changed in ({"credentialsSecret": "other"}, {"caSecret": {"name": "ca"}}):
        assert template(cluster(backup={"s3": {**S3, **changed}})) != base, changed
    assert template(cluster(backup={"pvc": {"claimName": "a"}})) != template(cluster(backup={"pvc": {"claimName": "b"}}))


def test_the_sidecar_is_told_what_its_pod_mounts() -> None:
    backup = {"s3": {**S3, "caSecret": {"name": "s3-ca"}}}
    assert sidecar_env(cluster(backup=backup))[contract.SidecarEnv.BACKUP_MOUNTS] == backups.mounts(backup)
    assert contract.SidecarEnv.BACKUP_MOUNTS not in sidecar_env(cluster()), \
        "a cluster without spec.backup keeps its template (no roll on an operator upgrade)"
