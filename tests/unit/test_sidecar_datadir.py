"""Moving a data dir aside keeps every copy until release: data is never deleted on the way."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftset.sidecar.io import datadir

pytestmark = pytest.mark.unit


def used(path: Path, content: str = "x") -> None:
    (path / "member").mkdir(parents=True)
    (path / "member" / "db").write_text(content)


def test_move_aside_renames_data_and_marker_and_says_why(tmp_path: Path) -> None:
    data, mark = tmp_path / "data", tmp_path / "data.member.json"
    used(data)
    mark.write_text("{}")
    dest = Path(datadir.move_aside(str(data), str(mark), "replaced on request", now=100))
    assert dest.name == "data.aside-100"
    assert not data.exists() and not mark.exists()
    assert (dest / "member" / "db").read_text() == "x"
    assert (tmp_path / "data.aside-100.member.json").read_text() == "{}"
    assert "replaced on request" in (dest / datadir.REASON_FILE).read_text()


def test_earlier_copies_are_kept_until_release(tmp_path: Path) -> None:
    data, mark = tmp_path / "data", tmp_path / "data.member.json"
    used(data, "first")
    first = datadir.move_aside(str(data), str(mark), "one", now=100)
    used(data, "second")
    second = datadir.move_aside(str(data), str(mark), "two", now=100)  # same second: a distinct name
    assert first != second
    assert datadir.aside(str(data)) == sorted([first, second])
    assert (Path(first) / "member" / "db").read_text() == "first"
    assert (Path(second) / "member" / "db").read_text() == "second"


def test_release_deletes_every_copy_and_nothing_else(tmp_path: Path) -> None:
    data, mark = tmp_path / "data", tmp_path / "data.member.json"
    used(data)
    mark.write_text("{}")
    (tmp_path / "data.stale-5").mkdir()  # what an earlier sidecar left
    datadir.move_aside(str(data), str(mark), "gone", now=7)
    used(data, "live")
    mark.write_text("{}")
    assert len(datadir.release(str(data))) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "data.member.json"]
    assert (data / "member" / "db").read_text() == "live"


def test_move_aside_of_a_missing_dir_still_records_the_reason(tmp_path: Path) -> None:
    dest = Path(datadir.move_aside(str(tmp_path / "data"), str(tmp_path / "data.member.json"), "lost", now=1))
    assert (dest / datadir.REASON_FILE).exists()
    assert datadir.aside(str(tmp_path / "data")) == [str(dest)]


def test_a_kept_copy_says_why_and_is_never_released(tmp_path: Path) -> None:
    data, mark = tmp_path / "data", tmp_path / "data.member.json"
    used(data, "only here")
    mark.write_text("{}")
    dest = Path(datadir.move_aside(str(data), str(mark), "quorum loss r7", keep_as=datadir.quorum_loss_name("r7")))
    assert dest.name == "data.quorum-loss-r7"
    assert "quorum loss r7" in (dest / datadir.REASON_FILE).read_text()
    assert (tmp_path / "data.quorum-loss-r7.member.json").read_text() == "{}"
    assert datadir.aside(str(data)) == [] and datadir.release(str(data)) == []
    assert (dest / "member" / "db").read_text() == "only here"
