"""The krew manifest of `kubectl raftset` names the archive tools.krewpack builds, and that archive
holds a shim that runs the Python package's plugin (issue 31, item 2)."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from tools import krewpack

pytestmark = pytest.mark.unit

MANIFEST = krewpack.KREW / "raftset.yaml"


def test_the_manifests_sha256_is_the_archives() -> None:
    manifest = yaml.safe_load(MANIFEST.read_text())
    (platform,) = manifest["spec"]["platforms"]
    assert platform["sha256"] == krewpack.sha256()
    assert platform["bin"] == "kubectl-raftset" and platform["uri"].endswith("/kubectl-raftset.tar.gz")
    assert manifest["spec"]["version"].lstrip("v") in platform["uri"]
    assert "pip install raftset" in manifest["spec"]["caveats"]


def test_the_archive_is_the_same_bytes_every_time() -> None:
    assert krewpack.archive() == krewpack.archive()
    with tarfile.open(fileobj=io.BytesIO(krewpack.archive())) as tar:
        (member,) = tar.getmembers()
        assert (member.name, member.mode, member.mtime) == ("kubectl-raftset", 0o755, 0)


def test_the_shim_runs_the_packages_plugin() -> None:
    """The shim's --help is the plugin's (the python3 on PATH must have raftset: here, the venv's)."""
    shim = krewpack.KREW / "kubectl-raftset"
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONPATH": ""}
    done = subprocess.run([str(shim), "--help"], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "usage: kubectl raftset" in done.stdout
