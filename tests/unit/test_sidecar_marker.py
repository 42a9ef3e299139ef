"""The member marker and moving a stale data dir aside (on a temporary directory)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raftset.sidecar import marker

pytestmark = pytest.mark.unit


def test_marker_round_trip_and_unreadable_markers(tmp_path: Path) -> None:
    path = str(tmp_path / "data.member.json")
    assert marker.read(path) is None
    m = marker.Marker(0xDEADBEEF, "demo-1", "http://x:2380", {"demo-0": "http://y:2380"})
    marker.write(path, m)
    assert marker.read(path) == m
    assert '"deadbeef"' in Path(path).read_text()
    Path(path).write_text("{not json")
    assert marker.read(path) is None


def test_has_data(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert not marker.has_data(str(data))
    data.mkdir()
    assert not marker.has_data(str(data))
    (data / "member").mkdir()
    assert marker.has_data(str(data))


def test_move_aside_keeps_only_the_newest_stale_copy(tmp_path: Path) -> None:
    data, mark = tmp_path / "data", tmp_path / "data.member.json"
    (tmp_path / "data.stale-1").mkdir()
    (tmp_path / "data.stale-1.member.json").write_text("{}")
    (data / "member").mkdir(parents=True)
    mark.write_text("{}")
    dest = marker.move_aside(str(data), str(mark))
    assert not data.exists() and not mark.exists()
    assert os.path.isdir(dest) and os.path.isfile(f"{dest}.member.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([Path(dest).name, Path(dest).name + ".member.json"])
