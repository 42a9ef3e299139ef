"""raftset.backups: schedule, retention, object names, manifests, records, conditions, decisions."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from raftset import backups
from raftset.backups import Decision, Failure, Manifest, Record, Stored

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 23, 7, 0, 0, tzinfo=timezone.utc)


def manifest(key: str = "p/ns/demo/snapshot-20261123T070000Z-r42.db", taken: str = "2026-11-23T07:00:00Z") -> Manifest:
    return Manifest(key=key, sha256="ab" * 32, size=1234, revision=42, taken=taken, engine="etcd",
                    cluster="demo", namespace="ns")


# ---- schedule


@pytest.mark.parametrize("schedule", ["*/5 * * * *", "0 3 * * *", "0 */6 * * 1-5", "@hourly", "@daily",
                                      "15 2 1 JAN *"])
def test_valid_schedules(schedule: str) -> None:
    assert backups.schedule_error(schedule) is None


@pytest.mark.parametrize(("schedule", "why"), [
    ("61 * * * *", "not a valid cron"),
    ("* * * *", "five fields"),
    ("* * * * * *", "five fields"),
    ("0 25 * * *", "not a valid cron"),
    ("every hour", "five fields"),
])
def test_invalid_schedules(schedule: str, why: str) -> None:
    error = backups.schedule_error(schedule)
    assert error is not None and why in error


def test_next_run_is_strictly_after() -> None:
    assert backups.next_run("0 * * * *", T0) == T0 + timedelta(hours=1)
    assert backups.next_run("*/5 * * * *", T0 + timedelta(minutes=1)) == T0 + timedelta(minutes=5)


def test_next_run_refuses_a_bad_schedule() -> None:
    with pytest.raises(backups.ConfigError):
        backups.next_run("61 * * * *", T0)


def test_due_only_once_a_scheduled_time_passed() -> None:
    assert not backups.is_due("0 * * * *", T0, T0 + timedelta(minutes=59))
    assert backups.is_due("0 * * * *", T0, T0 + timedelta(hours=1))
    # Missed runs collapse into one: still just "due".
    assert backups.is_due("0 * * * *", T0, T0 + timedelta(days=3))


# ---- retention


@pytest.mark.parametrize(("text", "age"), [
    ("7d", timedelta(days=7)), ("12h", timedelta(hours=12)), ("30m", timedelta(minutes=30)),
    ("1d12h", timedelta(days=1, hours=12)), ("1d2h3m", timedelta(days=1, hours=2, minutes=3)),
])
def test_parse_age(text: str, age: timedelta) -> None:
    assert backups.parse_age(text) == age


@pytest.mark.parametrize("text", ["", "0d", "7", "1w", "-1d", "h", "1h1d"])
def test_parse_age_refuses(text: str) -> None:
    with pytest.raises(backups.ConfigError):
        backups.parse_age(text)


def stored(n: int) -> list[Stored]:
    """n backups, one an hour, newest last."""
    return [Stored(f"k{i}", T0 + timedelta(hours=i), 10 * i) for i in range(n)]


def test_retention_by_count_keeps_the_newest() -> None:
    got = backups.expired(stored(5), keep=2, max_age=None, now=T0 + timedelta(hours=5), latest="k4")
    assert sorted(got) == ["k0", "k1", "k2"]


def test_retention_by_age() -> None:
    now = T0 + timedelta(hours=10)
    got = backups.expired(stored(5), keep=None, max_age=timedelta(hours=7, minutes=30), now=now, latest="k4")
    assert sorted(got) == ["k0", "k1", "k2"]  # k2 is 8 h old, k3 7 h


def test_retention_by_count_and_age_removes_what_either_removes() -> None:
    now = T0 + timedelta(hours=10)
    got = backups.expired(stored(5), keep=4, max_age=timedelta(hours=8, minutes=30), now=now, latest="k4")
    assert sorted(got) == ["k0", "k1"]  # k0 beyond the count, k1 9 h old


def test_retention_never_removes_the_newest_or_latest() -> None:
    now = T0 + timedelta(days=30)
    got = backups.expired(stored(3), keep=1, max_age=timedelta(hours=1), now=now, latest="k0")
    assert sorted(got) == ["k1"]  # k2 is the newest, k0 is what "latest" names


def test_retention_orders_backups_of_one_second_by_revision_not_by_name() -> None:
    """CI saw r118 removed and r72 kept: by name, "r118" sorts before "r72"."""
    keys = [backups.snapshot_key("", "ns", "demo", T0, r) for r in (72, 118, 171)]
    listed = backups.published(keys + [backups.manifest_key(k) for k in keys])
    assert [s.revision for s in listed] == [72, 118, 171]
    assert backups.expired(listed, keep=2, max_age=None, now=T0, latest=keys[2]) == [keys[0]]


def test_retention_without_settings_keeps_everything() -> None:
    assert backups.expired(stored(4), keep=None, max_age=None, now=T0 + timedelta(days=9), latest=None) == []


def test_retention_of_spec() -> None:
    assert backups.retention_of({}) == (None, None)
    assert backups.retention_of({"retention": {"keep": 3, "maxAge": "2d"}}) == (3, timedelta(days=2))


# ---- names


def test_snapshot_keys_sort_by_time_and_parse_back() -> None:
    a = backups.snapshot_key("/backups/", "ns", "demo", T0, 7)
    b = backups.snapshot_key("backups", "ns", "demo", T0 + timedelta(seconds=1), 3)
    assert a == "backups/ns/demo/snapshot-20261123T070000Z-r7.db"
    assert a < b
    assert backups.parse_snapshot_key(a) == (T0, 7)
    assert backups.parse_snapshot_key("backups/ns/demo/latest.json") is None


def test_empty_prefix() -> None:
    assert backups.cluster_prefix("", "ns", "demo") == "ns/demo/"
    assert backups.latest_key("", "ns", "demo") == "ns/demo/latest.json"


def test_only_snapshots_with_a_manifest_are_published() -> None:
    done = backups.snapshot_key("", "ns", "demo", T0, 1)
    half = backups.snapshot_key("", "ns", "demo", T0 + timedelta(hours=1), 2)
    keys = [done, backups.manifest_key(done), half, backups.latest_key("", "ns", "demo"), "ns/demo/other"]
    assert backups.published(keys) == [Stored(done, T0, 1)]


def test_restore_manifest_key() -> None:
    assert backups.restore_manifest_key("latest", "p", "ns", "old") == "p/ns/old/latest.json"
    key = "p/ns/old/snapshot-20261123T070000Z-r7.db"
    assert backups.restore_manifest_key(key, "p", "ns", "new") == key + ".json"
    with pytest.raises(backups.ConfigError):
        backups.restore_manifest_key("p/ns/old/latest.json", "p", "ns", "old")


# ---- manifests and records


def test_manifest_round_trip_and_garbage() -> None:
    m = manifest()
    assert Manifest.from_json(m.to_json()) == m
    for bad in (b"", b"{}", b"[1]", b'{"key": "k"}'):
        with pytest.raises(backups.ConfigError):
            Manifest.from_json(bad)


def test_record_round_trip_and_garbage_is_empty() -> None:
    r = Record(since="2026-11-23T07:00:00Z", request="1", last_success=manifest(),
               last_failure=Failure("2026-11-23T08:00:00Z", backups.BUCKET_MISSING, "NoSuchBucket"))
    assert Record.from_json(r.to_json()) == r
    for bad in (None, "", "not json", "[]", '{"last_success": {"key": 1}}'):
        assert Record.from_json(bad) == Record()


def test_failed_and_succeeded_keep_the_other_half() -> None:
    r = backups.failed(Record(last_success=manifest()), T0, backups.ENDPOINT_UNREACHABLE, "x" * 900)
    assert r.last_success == manifest()
    assert r.last_failure == Failure("2026-11-23T07:00:00Z", backups.ENDPOINT_UNREACHABLE, "x" * 500)
    again = backups.succeeded(r, manifest(taken="2026-11-23T09:00:00Z"))
    assert again.last_failure == r.last_failure and again.last_success is not None


def test_failure_reasons() -> None:
    assert backups.failure_reason("InvalidAccessKeyId") == backups.CREDENTIALS_REJECTED
    assert backups.failure_reason("SignatureDoesNotMatch") == backups.CREDENTIALS_REJECTED
    assert backups.failure_reason("NoSuchBucket") == backups.BUCKET_MISSING
    assert backups.failure_reason("EndpointConnectionError") == backups.ENDPOINT_UNREACHABLE
    assert backups.failure_reason("NoSuchKey") == backups.BACKUP_MISSING
    assert backups.failure_reason("SomethingNew") == backups.UPLOAD_FAILED


# ---- status and condition


def test_status_of() -> None:
    assert backups.status_of(Record()) == {}
    r = Record(last_success=manifest(), last_failure=Failure("2026-11-23T08:00:00Z", "BucketMissing", "gone"))
    assert backups.status_of(r) == {
        "lastSuccess": {"time": "2026-11-23T07:00:00Z", "revision": 42, "size": 1234,
                        "key": manifest().key, "sha256": "ab" * 32},
        "lastFailure": {"time": "2026-11-23T08:00:00Z", "reason": "BucketMissing", "message": "gone"},
    }


def test_condition() -> None:
    assert backups.condition(None, False)[1] == "NotConfigured"
    assert backups.condition(None, True)[:2] == ("Unknown", "NoBackupYet")
    ok = Record(last_success=manifest())
    assert backups.condition(ok, True)[:2] == ("True", "BackupSucceeded")
    later_failure = Record(last_success=manifest(), last_failure=Failure("2026-11-23T08:00:00Z", "BucketMissing", "m"))
    assert backups.condition(later_failure, True) == ("False", "BucketMissing", "m")
    earlier_failure = Record(last_success=manifest(taken="2026-11-23T09:00:00Z"),
                             last_failure=Failure("2026-11-23T08:00:00Z", "BucketMissing", "m"))
    assert backups.condition(earlier_failure, True)[0] == "True"
    only_failure = Record(last_failure=Failure("2026-11-23T08:00:00Z", "CredentialsRejected", "m"))
    assert backups.condition(only_failure, True)[:2] == ("False", "CredentialsRejected")


def test_condition_of_a_hand_edited_record_with_unreadable_times_does_not_raise() -> None:
    """An unreadable time counts as long ago: the readable attempt is the newer one."""
    bad_failure = Record(last_success=manifest(), last_failure=Failure("yesterday", "BucketMissing", "m"))
    assert backups.condition(bad_failure, True)[0] == "True"
    bad_success = Record(last_success=manifest(taken="soon"),
                         last_failure=Failure("2026-11-23T08:00:00Z", "BucketMissing", "m"))
    assert backups.condition(bad_success, True)[:2] == ("False", "BucketMissing")


# ---- settings


def test_settings_errors() -> None:
    s3 = {"endpoint": "http://x:1", "bucket": "b", "credentialsSecret": "c"}
    assert backups.settings_error({"s3": s3, "schedule": "*/5 * * * *"}) is None
    assert "valid cron" in (backups.settings_error({"s3": s3, "schedule": "61 * * * *"}) or "")
    assert "retention age" in (backups.settings_error({"s3": s3, "retention": {"maxAge": "1w"}}) or "")
    assert "exactly one destination" in (backups.settings_error({}) or "")
    assert "exactly one destination" in (backups.settings_error({"s3": s3, "pvc": {"claimName": "c"}}) or "")


def test_destination_of() -> None:
    s3 = {"endpoint": "https://s3.example:9000/", "bucket": "b", "prefix": "p", "credentialsSecret": "c",
          "caSecret": {"name": "ca", "key": "bundle.pem"}}
    got = backups.destination_of({"s3": s3}, credentials_dir="/cred", ca_dir="/ca", volume="/vol")
    assert got == backups.Destination(prefix="p", endpoint="https://s3.example:9000", bucket="b",
                                      credentials_dir="/cred", ca_file="/ca/bundle.pem")
    assert got.is_s3
    pvc = backups.destination_of({"pvc": {"claimName": "c", "prefix": "q"}}, credentials_dir="/cred",
                                 ca_dir="/ca", volume="/vol")
    assert pvc == backups.Destination(prefix="q", path="/vol") and not pvc.is_s3
    with pytest.raises(backups.ConfigError):
        backups.destination_of({}, credentials_dir="/cred", ca_dir="/ca", volume="/vol")


# ---- decisions


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_first_sight_of_a_schedule_anchors_it() -> None:
    d = backups.decide("*/5 * * * *", None, Record(), at(1))
    assert d == Decision(False, "", Record(since="2026-11-23T07:01:00Z"))


def test_scheduled_backup_when_due_and_the_anchor_moves() -> None:
    r = Record(since="2026-11-23T07:01:00Z")
    assert backups.decide("*/5 * * * *", None, r, at(4)) == Decision(False, "", r)
    d = backups.decide("*/5 * * * *", None, r, at(5))
    assert d.take and d.trigger == "scheduled" and d.record.since == "2026-11-23T07:05:00Z"


def test_one_request_is_one_backup() -> None:
    d = backups.decide(None, "r1", Record(), at(0))
    assert d.take and d.trigger == "on-demand" and d.record.request == "r1"
    # The id stays on the Lease after it was served: no second backup, whoever leads next.
    again = backups.decide(None, "r1", d.record, at(1))
    assert not again.take and again.record == d.record
    assert backups.decide(None, "r2", d.record, at(2)).take


# ---- the operator takes backup-now off the cluster object


def test_intake_records_a_new_request_then_clears_the_annotation() -> None:
    assert backups.intake("true", True, None, "", at(0)) == backups.Intake("2026-11-23T07:00:00.000000Z", True)
    # The previous request was served: the same annotation value again is a new request.
    served = "2026-11-23T07:00:00.000000Z"
    assert backups.intake("true", True, served, served, at(1)) == backups.Intake("2026-11-23T07:01:00.000000Z", True)


def test_intake_leaves_everything_without_an_annotation_or_spec_backup() -> None:
    assert backups.intake(None, True, None, "", at(0)) == backups.Intake(None, False)
    assert backups.intake(None, True, "a", "", at(0)) == backups.Intake(None, False)
    assert backups.intake("true", False, None, "", at(0)) == backups.Intake(None, False), \
        "without spec.backup the annotation stays where the user put it"


def test_intake_folds_an_annotation_into_a_request_still_pending() -> None:
    # The operator wrote the id and stopped before removing the annotation (or the user asked
    # again before the leader served it): no second request, the annotation just goes.
    assert backups.intake("true", True, "a", "", at(1)) == backups.Intake(None, True)
    assert backups.intake("again", True, "b", "a", at(1)) == backups.Intake(None, True)


def test_a_request_is_served_once_across_restarts_and_a_missing_leader() -> None:
    """Operator and sidecar as the API holds their state: a request written while no sidecar
    leads is served by the next leader, exactly once, and the annotation is gone."""
    lease: dict[str, str] = {}  # backup-request (operator) and the record (sidecar)
    annotation: str | None = "true"

    def operator(now: datetime, crash_before_clear: bool = False) -> None:
        nonlocal annotation
        record = Record.from_json(lease.get("record"))
        step = backups.intake(annotation, True, lease.get("request"), record.request, now)
        if step.record is not None:
            lease["request"] = step.record
        if step.clear and not crash_before_clear:
            annotation = None

    def sidecar(now: datetime) -> bool:
        d = backups.decide(None, lease.get("request"), Record.from_json(lease.get("record")), now)
        lease["record"] = d.record.to_json()
        return d.take

    operator(at(0), crash_before_clear=True)  # no leader yet, and the operator restarts
    operator(at(1))
    assert annotation is None and lease["request"] == backups.request_id(at(0))
    operator(at(2))
    taken = [sidecar(at(m)) for m in (3, 4)]  # a leader at last, then a sidecar restart
    assert taken == [True, False]
    operator(at(5))
    assert not sidecar(at(6)), "nothing asked, nothing taken"
    annotation = "true"  # the user asks again with the same value
    operator(at(7))
    assert annotation is None and sidecar(at(8)) and not sidecar(at(9))


def test_a_request_wins_over_the_schedule_and_keeps_its_anchor() -> None:
    r = Record(since="2026-11-23T07:01:00Z")
    d = backups.decide("*/5 * * * *", "now", r, at(10))
    assert d.trigger == "on-demand" and d.record.since == r.since


def test_no_schedule_drops_the_anchor() -> None:
    assert backups.decide(None, None, Record(since="2026-11-23T07:01:00Z"), at(3)).record.since == ""


def test_an_unreadable_anchor_restarts_the_schedule() -> None:
    d = backups.decide("*/5 * * * *", None, Record(since="yesterday"), at(3))
    assert not d.take and d.record.since == "2026-11-23T07:03:00Z"


def test_an_unreadable_schedule_restarts_the_anchor_and_takes_nothing() -> None:
    d = backups.decide("61 * * * *", None, Record(since="2026-11-23T07:01:00Z"), at(3))
    assert not d.take and d.record.since == "2026-11-23T07:03:00Z"


# ---- abandoned uploads: the setting, the count


@pytest.mark.parametrize(("written", "after"), [
    (None, timedelta(hours=24)),  # the default
    ("1h", timedelta(hours=1)),  # the floor itself
    ("60m", timedelta(hours=1)),
    ("0d1h", timedelta(hours=1)),
    ("90m", timedelta(minutes=90)),
    ("2d", timedelta(days=2)),
    ("1d12h", timedelta(hours=36)),
])
def test_abort_uploads_after(written: str | None, after: timedelta) -> None:
    retention = {} if written is None else {"abortIncompleteUploadsAfter": written}
    assert backups.abort_uploads_after({"retention": retention}) == after
    assert backups.abort_uploads_after({}) == timedelta(hours=24)


@pytest.mark.parametrize(("written", "why"), [
    ("59m", "at least 1h"), ("30m", "at least 1h"), ("0h59m", "at least 1h"), ("0d0h1m", "at least 1h"),
    ("0m", "positive"), ("1w", "must look like"), ("24", "must look like"), ("h", "must look like"),
])
def test_abort_uploads_after_below_the_floor_or_unreadable_is_refused(written: str, why: str) -> None:
    spec = {"pvc": {"claimName": "c"}, "retention": {"abortIncompleteUploadsAfter": written}}
    with pytest.raises(backups.ConfigError, match=why):
        backups.abort_uploads_after(spec)
    assert why in (backups.settings_error(spec) or ""), "the operator's BackupReady and the sidecar say the same"


def test_aborted_uploads_add_up_survive_the_record_and_show_in_status() -> None:
    r = backups.aborted(backups.aborted(Record(last_success=manifest()), 2), 1)
    assert r.aborted_uploads == 3
    assert Record.from_json(r.to_json()) == r
    assert backups.status_of(r)["abortedUploads"] == 3
    assert "abortedUploads" not in backups.status_of(Record(last_success=manifest())), "absent while none"
    assert Record.from_json('{"aborted_uploads": -4}').aborted_uploads == 0, "a hand-edited record"
    assert Record.from_json('{"since": "x"}').aborted_uploads == 0, "a record written before the count"


def test_every_record_transition_keeps_the_count() -> None:
    r = Record(since="2026-11-23T07:01:00Z", aborted_uploads=5)
    assert backups.succeeded(r, manifest()).aborted_uploads == 5
    assert backups.failed(r, T0, backups.UPLOAD_FAILED, "m").aborted_uploads == 5
    for schedule, request in ((None, None), ("*/5 * * * *", None), ("*/5 * * * *", "r1"), (None, "r1")):
        assert backups.decide(schedule, request, r, at(10)).record.aborted_uploads == 5, (schedule, request)


def test_snapshot_names() -> None:
    assert backups.is_snapshot_name("snapshot-20261123T070000Z-r7.db")
    for name in ("x/snapshot-20261123T070000Z-r7.db", "snapshot-20261123T070000Z-r7.db.json", "latest.json",
                 "xsnapshot-20261123T070000Z-r7.db", "snapshot-20261123T070000Z-r.db"):
        assert not backups.is_snapshot_name(name), name


# ---- what a pod mounts for spec.backup, and a pod that does not mount it yet

S3 = {"endpoint": "https://s3.example.com", "bucket": "b", "credentialsSecret": "s3-credentials"}


def test_mounts_name_only_the_secrets_or_the_claim() -> None:
    assert backups.mounts(None) == backups.mounts({}) == ""
    assert backups.mounts({"s3": S3}) == "s3 credentials=s3-credentials"
    assert backups.mounts({"s3": {**S3, "caSecret": {"name": "ca"}}}) == "s3 credentials=s3-credentials ca=ca/ca.crt"
    assert backups.mounts({"s3": {**S3, "caSecret": {"name": "ca", "key": "b.pem"}}}).endswith("ca=ca/b.pem")
    assert backups.mounts({"pvc": {"claimName": "c", "prefix": "p"}}) == "pvc claim=c"
    same = {backups.mounts({"s3": {**S3, **change}, "schedule": "@daily", "retention": {"keep": 2}})
            for change in ({}, {"bucket": "other"}, {"endpoint": "http://x"}, {"prefix": "p"}, {"region": "eu"})}
    assert same == {backups.mounts({"s3": S3})}, "what the sidecar reads each round rolls nothing"


def test_a_pod_that_mounts_another_destination_waits_for_the_roll() -> None:
    spec = {"s3": S3}
    assert backups.unmounted(spec, backups.mounts(spec)) is None
    assert backups.unmounted({**spec, "schedule": "@hourly"}, backups.mounts(spec)) is None
    not_yet = backups.unmounted(spec, "")
    assert not_yet is not None and "no backup destination" in not_yet and "s3-credentials" in not_yet
    renamed = backups.unmounted({"s3": {**S3, "credentialsSecret": "new"}}, backups.mounts(spec))
    assert renamed is not None and "credentials=new" in renamed
    assert backups.unmounted({"pvc": {"claimName": "c"}}, backups.mounts(spec)) is not None


# ---- latest only moves forward


def taken_at(revision: int, taken: str = "2026-11-23T07:00:00Z", uid: str = "uid-1") -> Manifest:
    return replace(manifest(key=f"p/ns/demo/snapshot-20261123T070000Z-r{revision}.db", taken=taken),
                   revision=revision, cluster_uid=uid)


def test_latest_is_published_where_there_is_none_or_it_names_an_older_revision() -> None:
    assert backups.latest_stays(None, taken_at(42)) is None
    assert backups.latest_stays(taken_at(41), taken_at(42)) is None
    # the revision decides, not the time taken: a deposed leader's clock may run ahead
    assert backups.latest_stays(taken_at(41, taken="2026-11-23T08:00:00Z"), taken_at(42)) is None


def test_a_slower_backup_of_an_older_revision_never_moves_latest_back() -> None:
    """A deposed leader's backup finishing after the new leader's: same cluster, lower revision."""
    why = backups.latest_stays(taken_at(50), taken_at(42, taken="2026-11-23T08:00:00Z"))
    assert why == ("latest names p/ns/demo/snapshot-20261123T070000Z-r50.db at revision 50, "
                   "not older than revision 42")
    assert backups.latest_stays(taken_at(42), taken_at(42)) is not None, "the same revision is no step forward"


def test_a_manifest_without_a_cluster_uid_compares_by_revision() -> None:
    """Manifests written before the uid was recorded: the revision alone, as for one incarnation."""
    assert backups.latest_stays(taken_at(50, uid=""), taken_at(42)) is not None
    assert backups.latest_stays(taken_at(41, uid=""), taken_at(42)) is None
    assert backups.latest_stays(taken_at(50), taken_at(42, uid="")) is not None


def test_another_incarnation_of_the_cluster_is_ordered_by_the_time_taken() -> None:
    """A cluster deleted and created again under the same name counts its revisions from 1 (or from
    the snapshot it restored): its first backup replaces the old cluster's latest if taken later."""
    old = taken_at(9000, taken="2026-11-23T07:00:00Z", uid="old")
    assert backups.latest_stays(old, taken_at(5, taken="2026-11-23T07:30:00Z", uid="new")) is None
    why = backups.latest_stays(old, taken_at(9500, taken="2026-11-23T06:59:00Z", uid="new"))
    assert why is not None and "another incarnation" in why and "taken later" in why


def test_a_manifest_records_the_cluster_uid_and_reads_one_without_it() -> None:
    m = taken_at(42)
    assert Manifest.from_json(m.to_json()) == m
    legacy = {k: v for k, v in json.loads(m.to_json()).items() if k != "cluster_uid"}
    assert Manifest.from_json(json.dumps(legacy).encode()).cluster_uid == ""
    assert Record.from_json(Record(last_success=m).to_json()).last_success == m
