"""Fetch a component's pinned source once into the cache (Xline, cert-manager: not on the proxy).

The source comes from the archive an environment variable names (an offline snapshot), else
from git. Either way it lands in a temporary directory beside its place and is renamed into
place only when complete, so an interrupted or bad fetch leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Source:
    """Where one component's source lives and how to get it."""

    root: Path  # <cache>/src/<name>-<pin>
    marker: str  # a file under `root` that only a complete source has: "xline/Cargo.lock"
    env: str  # names a source archive that unpacks to `marker`
    git: tuple[tuple[str, ...], ...]  # commands, run in the fresh directory, that fetch the pin
    archive: str  # the archive's file name, for the message when git fails
    error: type[Exception]  # the component's build error, raised with a message saying what is missing

    @property
    def complete(self) -> bool:
        return (self.root / self.marker).is_file()


def _unpack(source: Source, archive: Path, dest: Path) -> None:
    if not archive.is_file():
        raise source.error(f"${source.env} names {archive}, which is not a file")
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    if not (dest / source.marker).is_file():
        raise source.error(f"{archive} does not unpack to {source.marker}")


def _clone(source: Source, dest: Path) -> None:
    for command in source.git:
        try:
            subprocess.run(command, cwd=dest, check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise source.error(
                f"no source: ${source.env} is unset and `{' '.join(command)}` failed ({exc}); "
                f"point ${source.env} at {source.archive}"
            ) from exc


def ensure(source: Source, log: Callable[[str], None]) -> Path:
    """`source.root`, holding the complete source, fetched once."""
    if source.complete:
        return source.root
    source.root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{source.root.name}-", dir=source.root.parent))
    try:
        archive = os.environ.get(source.env)
        if archive:
            log(f"unpacking {archive}")
            _unpack(source, Path(archive), tmp)
        else:
            log(f"${source.env} unset: " + " && ".join(" ".join(c) for c in source.git))
            _clone(source, tmp)
        tmp.rename(source.root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return source.root
