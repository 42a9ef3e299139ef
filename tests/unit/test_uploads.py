"""raftset.sidecar.pure.uploads.abandoned: which incomplete uploads a sweep aborts, and which it never touches."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

import pytest

from raftset import backups
from raftset.sidecar.pure.uploads import Incomplete, abandoned

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=timezone.utc)
DAY = timedelta(hours=24)
PREFIX = backups.cluster_prefix("backups", "shop", "orders")
SNAP = "snapshot-20261122T100000Z-r42.db"


def upload(name: str = SNAP, *, age: timedelta = 2 * DAY, upload_id: str = "u1", prefix: str = PREFIX) -> Incomplete:
    return Incomplete(prefix + name, upload_id, NOW - age)


def chosen(*uploads: Incomplete, older_than: timedelta = DAY, in_flight: frozenset[str] = frozenset(),
           prefix: str = PREFIX) -> list[Incomplete]:
    return abandoned(uploads, now=NOW, older_than=older_than, in_flight=in_flight, prefix=prefix)


def test_nothing_listed_nothing_aborted() -> None:
    assert chosen() == []


def test_an_old_snapshot_upload_of_this_cluster_is_aborted() -> None:
    old = upload()
    assert chosen(old) == [old]


@pytest.mark.parametrize(("age", "aborted"), [
    (timedelta(0), False),
    (DAY - timedelta(seconds=1), False),
    (DAY, False),  # exactly as old as the setting: not older than it yet
    (DAY + timedelta(microseconds=1), True),
    (DAY + timedelta(seconds=1), True),
    (365 * DAY, True),
    (-timedelta(hours=1), False),  # dated in the future: a skewed clock, not an old upload
])
def test_age_against_older_than(age: timedelta, aborted: bool) -> None:
    assert bool(chosen(upload(age=age))) is aborted


def test_the_upload_a_taker_is_writing_is_never_aborted_however_old() -> None:
    mine = upload(age=30 * DAY, upload_id="live")
    assert chosen(mine, in_flight=frozenset({"live"})) == []


def test_in_flight_spares_only_that_upload_of_the_same_key() -> None:
    live, dead = upload(age=3 * DAY, upload_id="live"), upload(age=3 * DAY, upload_id="dead")
    assert chosen(live, dead, in_flight=frozenset({"live"})) == [dead]


@pytest.mark.parametrize("key", [
    "backups/shop/other/" + SNAP,  # another cluster in the same namespace
    "backups/prod/orders/" + SNAP,  # the same name in another namespace
    "elsewhere/shop/orders/" + SNAP,  # another prefix
    "backups/shop/orders-2/" + SNAP,  # a cluster whose name starts with ours
    "backups/shop/orders",  # the prefix without its slash
    SNAP,  # the bucket's root
    "Backups/shop/orders/" + SNAP,  # keys are case-sensitive
])
def test_keys_outside_the_clusters_prefix_are_never_aborted(key: str) -> None:
    assert chosen(Incomplete(key, "u1", NOW - 30 * DAY)) == []


@pytest.mark.parametrize("name", [
    "x/y/" + SNAP,  # a deeper prefix: another cluster's whose prefix starts with ours, maybe uploading now
    "nested/" + SNAP,
    "latest.json",
    SNAP + ".json",  # a manifest
    "snapshot-20261122T100000Z-r42.db.partial",
    "old-" + SNAP,
    "snapshot-20261122T100000Z.db",
    "notes.txt",
    "",
])
def test_only_snapshot_names_directly_below_the_prefix_are_ours(name: str) -> None:
    assert chosen(upload(name, age=30 * DAY)) == []


def test_an_empty_store_prefix_still_confines_the_sweep_to_the_cluster() -> None:
    prefix = backups.cluster_prefix("", "shop", "orders")
    ours = upload(prefix=prefix)
    theirs = upload(prefix=backups.cluster_prefix("", "shop", "payments"))
    assert prefix == "shop/orders/"
    assert chosen(ours, theirs, prefix=prefix) == [ours]


def test_every_combination_of_the_rules() -> None:
    """Aborted exactly when all four hold: our prefix, a snapshot name, not in flight, old enough."""
    for inside, snapshot, flying, old in itertools.product((True, False), repeat=4):
        key = (PREFIX if inside else "backups/shop/other/") + (SNAP if snapshot else "latest.json")
        candidate = Incomplete(key, "u1", NOW - (2 * DAY if old else DAY / 2))
        got = chosen(candidate, in_flight=frozenset({"u1"} if flying else set()))
        assert (got == [candidate]) is (inside and snapshot and not flying and old), (inside, snapshot, flying, old)


def test_the_floor_setting_aborts_what_is_older_than_an_hour() -> None:
    hour = backups.ABORT_UPLOADS_FLOOR
    stale, fresh = upload(age=hour + timedelta(seconds=1), upload_id="a"), upload(age=hour / 2, upload_id="b")
    assert chosen(stale, fresh, older_than=hour) == [stale]


def test_the_order_is_oldest_first_then_key_then_id() -> None:
    a = upload("snapshot-20261120T000000Z-r1.db", age=5 * DAY, upload_id="z")
    b = upload("snapshot-20261121T000000Z-r2.db", age=3 * DAY, upload_id="y")
    c = upload("snapshot-20261121T000000Z-r2.db", age=3 * DAY, upload_id="x")
    d = upload("snapshot-20261119T000000Z-r0.db", age=3 * DAY, upload_id="w")
    assert chosen(b, c, a, d) == [a, d, c, b]


def test_a_listing_page_iterator_is_enough_and_a_list_is_left_as_it_was() -> None:
    listed = [upload(upload_id="b"), upload(upload_id="a")]
    got = abandoned(iter(listed), now=NOW, older_than=DAY, in_flight=set(), prefix=PREFIX)
    assert [u.upload_id for u in got] == ["a", "b"] and [u.upload_id for u in listed] == ["b", "a"]
