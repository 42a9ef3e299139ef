"""The store's abandoned copies in its scratch volume: which go (pure), and the disk side on a real directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raftset.sidecar.io import scratch as disk
from raftset.sidecar.pure.scratch import ABANDONED_AFTER_S, Copy, abandoned

pytestmark = pytest.mark.unit

NOW = 1_000_000.0


def test_a_copy_unchanged_for_the_whole_age_goes_and_a_newer_one_stays() -> None:
    old = Copy("snapshot-a", NOW - ABANDONED_AFTER_S, 10)
    fresh = Copy("snapshot-b", NOW - ABANDONED_AFTER_S + 1, 10)
    assert abandoned([fresh, old], "snapshot-", NOW) == [old]


def test_nothing_but_the_stores_copies_is_judged() -> None:
    others = [Copy("app.sock", 0.0, 0), Copy("my-snapshot-1", 0.0, 0), Copy("snapshot", 0.0, 0)]
    assert abandoned(others, "snapshot-", NOW) == []


def test_nothing_to_remove_in_an_empty_or_missing_directory(tmp_path: Path) -> None:
    assert disk.entries(str(tmp_path), "snapshot-") == []
    assert disk.entries(str(tmp_path / "absent"), "snapshot-") == []


def test_a_copy_counts_as_changed_when_any_file_in_it_changed(tmp_path: Path) -> None:
    copy = tmp_path / "snapshot-1"
    copy.mkdir()
    (copy / "meta.sst").write_bytes(b"m" * 10)
    (copy / "kv.sst").write_bytes(b"k" * 100)
    os.utime(copy, (NOW - 600, NOW - 600))
    os.utime(copy / "meta.sst", (NOW - 600, NOW - 600))
    os.utime(copy / "kv.sst", (NOW - 5, NOW - 5))  # still being written
    (tmp_path / "unrelated").write_text("x")
    [found] = disk.entries(str(tmp_path), "snapshot-")
    assert found == Copy("snapshot-1", NOW - 5, 110)
    assert abandoned([found], "snapshot-", NOW) == []
    assert abandoned([found], "snapshot-", NOW + ABANDONED_AFTER_S) == [found]


def test_remove_takes_a_copy_and_leaves_the_rest(tmp_path: Path) -> None:
    (tmp_path / "snapshot-1").mkdir()
    (tmp_path / "snapshot-1" / "kv.sst").write_text("k")
    (tmp_path / "snapshot-2").write_text("a file")
    (tmp_path / "keep").write_text("x")
    disk.remove(str(tmp_path), "snapshot-1")
    disk.remove(str(tmp_path), "snapshot-2")
    disk.remove(str(tmp_path), "snapshot-3")  # gone already: nothing to do
    assert sorted(os.listdir(tmp_path)) == ["keep"]
