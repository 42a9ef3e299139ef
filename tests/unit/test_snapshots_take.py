"""snapshots.take over a backup volume, with a member that is a stub: `latest` only moves forward,
and a backup reports its progress as it moves bytes.

The real S3 server's side (conditional writes on versitygw, a deposed leader's slower backup) is
in tests/etcd/test_backups.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from raftset import backups
from raftset.sidecar.io import snapshots
from raftset.backups import Manifest
from raftset.sidecar.io.objectstore import DirectoryStore

pytestmark = pytest.mark.unit

TARGET = snapshots.Target("p", "ns", "demo", "uid-1")
LATEST = backups.latest_key("p", "ns", "demo")
T0 = datetime(2026, 11, 23, 7, 0, 0, tzinfo=timezone.utc)


class Member:
    """What take() asks of a member: a linearizable read's revision, and a snapshot stream."""

    def __init__(self, revision: int, chunks: int = 1, chunk_size: int = 0) -> None:
        self.revision, self.chunks, self.chunk_size = revision, chunks, chunk_size

    async def get_prefix(self, prefix: str) -> tuple[int, dict[str, Any]]:
        return self.revision, {}

    async def snapshot(self, sink: Callable[[bytes], Awaitable[None]]) -> None:
        for i in range(self.chunks):
            await sink(f"snapshot at {self.revision}, chunk {i}".encode().ljust(self.chunk_size, b"."))


async def take(store: DirectoryStore, revision: int, when: datetime) -> Manifest:
    return await snapshots.take(Member(revision), store, TARGET, "etcd", when)  # type: ignore[arg-type]


def latest(store: DirectoryStore) -> Manifest:
    raw = store.get(LATEST)
    assert raw is not None
    return Manifest.from_json(raw)


async def test_an_older_backup_finishing_later_is_published_but_does_not_move_latest_back(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    newer = await take(store, 50, T0)
    assert latest(store) == newer and newer.cluster_uid == "uid-1"
    # The deposed leader's backup: an older revision, finishing (and stamped) later.
    older = await take(store, 42, T0 + timedelta(minutes=1))
    assert latest(store) == newer, "latest went back to an older revision"
    assert store.get(backups.manifest_key(older.key)) == older.to_json(), "the backup itself is published"
    forward = await take(store, 51, T0 + timedelta(minutes=2))
    assert latest(store) == forward


async def test_a_latest_that_moved_between_the_read_and_the_write_is_judged_again(tmp_path: Path) -> None:
    """Another taker publishes a newer backup after this one read latest and before it wrote: the
    write is refused (the tag changed), latest is read again, and it stays the newer one."""
    store = DirectoryStore(tmp_path)
    await take(store, 40, T0)
    newer = await take(store, 60, T0)  # what the other taker will write, kept aside
    store.put(LATEST, (await take(store, 45, T0)).to_json())
    assert latest(store).revision == 45

    refused: list[bool] = []

    class Overtaken(DirectoryStore):
        def put_if(self, key: str, data: bytes, tag: str | None) -> bool:
            if not refused:  # the other taker writes between our read and our write
                DirectoryStore(tmp_path).put(LATEST, newer.to_json())
            refused.append(not super().put_if(key, data, tag))
            return not refused[-1]

    mine = await snapshots.take(Member(50), Overtaken(tmp_path), TARGET, "etcd",  # type: ignore[arg-type]
                                T0 + timedelta(minutes=1))
    assert refused == [True], "one conditional write, refused; latest read again, and left"
    assert latest(store) == newer, f"latest moved back to {latest(store).revision} (this backup: {mine.revision})"


async def test_an_unreadable_latest_is_replaced(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    store.put(LATEST, b"not a manifest")
    taken = await take(store, 7, T0)
    assert latest(store) == taken


async def test_every_snapshot_chunk_uploaded_part_and_chunk_read_back_reports_progress(tmp_path: Path) -> None:
    """What keeps a long backup round alive under supervision (the backuper passes the backup loop's
    reporter): 8 chunks of 1 MiB in 2 MiB parts, read back in objectstore.READ_CHUNK (1 MiB) chunks."""
    reports = 0

    def progress() -> None:
        nonlocal reports
        reports += 1

    store = DirectoryStore(tmp_path)
    mib = 1024 * 1024
    taken = await snapshots.take(Member(9, chunks=8, chunk_size=mib), store, TARGET, "etcd",  # type: ignore[arg-type]
                                 T0, part_size=2 * mib, progress=progress)
    assert taken.size == 8 * mib
    assert reports == 8 + 4 + 8, "one per chunk received, per part uploaded, per chunk read back"
