"""A backup volume's incomplete uploads (partial files): listed, swept and aborted like S3's.

The real S3 server's side of the same calls is in tests/etcd/test_backups.py.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from raftset import backups
from raftset.sidecar.io import snapshots
from raftset.sidecar.io.objectstore import DirectoryStore, StoreError
from raftset.sidecar.pure.uploads import Incomplete

pytestmark = pytest.mark.unit

TARGET = snapshots.Target("p", "ns", "demo")
PREFIX = backups.cluster_prefix("p", "ns", "demo")
T0 = datetime(2026, 11, 23, 7, 0, 0, tzinfo=timezone.utc)


def key(minute: int) -> str:
    return backups.snapshot_key("p", "ns", "demo", T0 + timedelta(minutes=minute), minute)


def leftover(root: Path, name: str, age: timedelta = timedelta(0)) -> None:
    """The partial file a taker killed `age` ago left behind."""
    path = root / (name + ".partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    then = (datetime.now(timezone.utc) - age).timestamp()
    os.utime(path, (then, then))


def test_an_open_upload_is_listed_under_its_id_until_it_completes(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    upload = store.begin(key(1))
    upload.part(b"half")
    [listed] = store.incomplete(PREFIX)
    assert (listed.key, listed.upload_id) == (key(1), upload.upload_id)
    assert abs(datetime.now(timezone.utc) - listed.initiated) < timedelta(minutes=1)
    assert store.keys(PREFIX) == [], "a partial file is no object"
    upload.complete()
    assert store.incomplete(PREFIX) == [] and store.keys(PREFIX) == [key(1)]
    leftover(tmp_path, key(2), timedelta(hours=2))
    [old] = store.incomplete(PREFIX)
    assert timedelta(hours=2) <= datetime.now(timezone.utc) - old.initiated < timedelta(hours=2, minutes=1)


def test_the_listing_keeps_to_the_prefix(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    leftover(tmp_path, key(1))
    leftover(tmp_path, backups.snapshot_key("p", "ns", "other", T0, 1))
    assert [u.key for u in store.incomplete(PREFIX)] == [key(1)]
    assert DirectoryStore(tmp_path / "absent").incomplete(PREFIX) == []


def test_abort_removes_the_partial_file_once(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    leftover(tmp_path, key(1))
    [listed] = store.incomplete(PREFIX)
    assert store.abort_incomplete(listed) is True
    assert store.incomplete(PREFIX) == [] and not list(tmp_path.rglob("*.partial"))
    assert store.abort_incomplete(listed) is False, "already gone"


@pytest.mark.parametrize("upload_id", ["../outside.db.partial", "p/ns/demo/snapshot.db"])
def test_abort_touches_nothing_but_a_partial_file_inside_the_volume(tmp_path: Path, upload_id: str) -> None:
    (tmp_path / "outside.db.partial").write_bytes(b"x")
    store = DirectoryStore(tmp_path / "volume")
    with pytest.raises(StoreError):
        store.abort_incomplete(Incomplete("k", upload_id, T0))
    assert (tmp_path / "outside.db.partial").exists()


async def test_the_sweep_aborts_the_old_leftover_and_spares_the_live_and_the_young(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    leftover(tmp_path, key(1), timedelta(hours=3))
    live = store.begin(key(2))  # this sidecar's taker, writing now
    leftover(tmp_path, key(3))  # another taker's, started just now
    later = datetime.now(timezone.utc) + timedelta(days=1)

    aborted = [u.key async for u in snapshots.abort_abandoned(
        store, TARGET, older_than=timedelta(hours=1), now=datetime.now(timezone.utc), in_flight={live.upload_id})]
    assert aborted == [key(1)]
    assert sorted(u.key for u in store.incomplete(PREFIX)) == [key(2), key(3)]
    aborted = [u.key async for u in snapshots.abort_abandoned(
        store, TARGET, older_than=timedelta(hours=1), now=later, in_flight={live.upload_id})]
    assert aborted == [key(3)], "a day later the other one is abandoned too, never the live one"
    live.part(b"still writing")
    live.complete()
    assert store.keys(PREFIX) == [key(2)] and store.incomplete(PREFIX) == []
