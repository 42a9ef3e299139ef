"""Build inputs and cache paths of the etcd and Xline components (no builds run here)."""

from __future__ import annotations

import dataclasses
import io
import re
import tarfile
from pathlib import Path

import pytest

from tools.devcluster import build, versions, xline

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RAFTSET_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_one_wrapper_module_per_etcd_minor_pins_all_three_binaries() -> None:
    assert [c.version for c in build.ETCDS] == list(versions.ETCD)
    assert build.ETCD.version == versions.ETCD[0]  # the plane's store: the newest
    for component in build.ETCDS:
        gomod = (component.module_dir / "go.mod").read_text()
        for module in ("server", "etcdctl", "etcdutl"):
            assert re.search(rf"go\.etcd\.io/etcd/{module}/v3 v{re.escape(component.version)}\b", gomod)
        assert (component.module_dir / "go.sum").is_file()
        assert component.out_dir.name == f"etcd-{component.version}"
        assert dict(component.renames) == {"server": "etcd"}


def test_renames_are_an_input_of_the_digest() -> None:
    renamed = dataclasses.replace(build.ETCD, renames=(("server", "etcd-server"),))
    assert build.inputs_digest(renamed, "go1.26") != build.inputs_digest(build.ETCD, "go1.26")
    assert build.inputs_digest(build.ETCD, "go1.26") != build.inputs_digest(build.ETCD, "go1.25")


def test_xline_paths_are_keyed_by_commit_and_toolchain(_cache: Path) -> None:
    x = xline.XLINE
    assert x.out_dir == _cache / "bin" / "xline-71479a4f-rust1.74.0"
    assert x.crate_dir == _cache / "src" / "xline-71479a4f" / "xline"
    assert x.target_dir == _cache / "cargo-target" / "xline-71479a4f-1.74.0"
    assert x.label == "xline-0.6.1+71479a4f"


def test_xline_digest_follows_commit_and_toolchain_only() -> None:
    x = xline.XLINE
    assert xline.inputs_digest(x) == xline.inputs_digest(dataclasses.replace(x))
    assert xline.inputs_digest(x) != xline.inputs_digest(dataclasses.replace(x, toolchain="1.75.0"))
    assert xline.inputs_digest(x) != xline.inputs_digest(dataclasses.replace(x, commit="0123abcd"))


def test_a_cached_xline_counts_only_with_its_stamp() -> None:
    x = xline.XLINE
    digest = xline.inputs_digest(x)
    x.out_dir.mkdir(parents=True)
    x.binary().write_text("#!/bin/sh\n")
    x.binary().chmod(0o755)
    assert not xline.is_built(x, digest)
    (x.out_dir / build.STAMP).write_text("other\n")
    assert not xline.is_built(x, digest)
    (x.out_dir / build.STAMP).write_text(digest + "\n")
    assert xline.is_built(x, digest)


def _archive(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_source_archive_is_unpacked_once_into_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _archive(tmp_path / "src.tar.gz", {"xline/Cargo.lock": "", "vendor/madsim/Cargo.toml": ""})
    monkeypatch.setenv(xline.SOURCE_ENV, str(archive))
    crate = xline.ensure_source(xline.XLINE, log=lambda _: None)
    assert crate == xline.XLINE.crate_dir and (crate / "Cargo.lock").is_file()
    assert (xline.XLINE.source_root / "vendor" / "madsim").is_dir()
    archive.unlink()  # a second call finds the unpacked source
    assert xline.ensure_source(xline.XLINE, log=lambda _: None) == crate


def test_a_bad_source_archive_fails_loudly_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(xline.SOURCE_ENV, str(_archive(tmp_path / "src.tar.gz", {"README": ""})))
    with pytest.raises(xline.XlineBuildError, match="Cargo.lock"):
        xline.ensure_source(xline.XLINE, log=lambda _: None)
    monkeypatch.setenv(xline.SOURCE_ENV, str(tmp_path / "missing.tar.gz"))
    with pytest.raises(xline.XlineBuildError, match="not a file"):
        xline.ensure_source(xline.XLINE, log=lambda _: None)
    assert not xline.XLINE.source_root.exists()
    assert list(xline.XLINE.source_root.parent.iterdir()) == []
