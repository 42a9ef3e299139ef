"""The member marker and moving a stale data dir aside (on a temporary directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftset.sidecar.io import marker
from raftset.sidecar.pure.marker import Marker, remembered

pytestmark = pytest.mark.unit


def test_marker_round_trip_and_unreadable_markers(tmp_path: Path) -> None:
    path = str(tmp_path / "data.member.json")
    assert marker.read(path) is None
    m = Marker(0xDEADBEEF, "demo-1", "http://x:2380", {"demo-0": "http://y:2380"})
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


def test_remembering_a_member_carries_over_what_is_not_given() -> None:
    old = Marker(0x1, "demo-1", "http://x:2380", {"demo-0": "http://y:2380"}, recovered="r1")
    # The same member seen again (the heartbeat): cluster and recovery id stay.
    assert remembered(old, 0x1, "demo-1", "http://x:2380") == old
    # A new member on this volume (a join): its own cluster; it never restarted alone.
    new = remembered(old, 0x2, "demo-1", "http://x:2380", cluster={"demo-1": "http://x:2380"})
    assert new == Marker(0x2, "demo-1", "http://x:2380", {"demo-1": "http://x:2380"}, recovered="")
    # The survivor of a quorum loss, once it leads alone: the recovery id is recorded.
    assert remembered(old, 0x1, "demo-1", "http://x:2380", recovered="r2").recovered == "r2"
    assert remembered(None, 0x3, "demo-1", "http://x:2380") == Marker(0x3, "demo-1", "http://x:2380")
