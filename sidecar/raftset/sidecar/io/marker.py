"""The member marker beside the data dir (moving data aside is raftset.sidecar.io.datadir).

The marker records which member the data dir belongs to, so that a refilled ordinal
whose PVC outlived its member (a stale PVC) is recognised and started clean.
"""

from __future__ import annotations

import os

from raftset.sidecar.pure.marker import Marker


def read(path: str) -> Marker | None:
    """The marker, or None if absent or unreadable (then membership decides alone)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return Marker.from_json(fh.read())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write(path: str, marker: Marker) -> None:
    write_atomic(path, marker.to_json() + "\n")


def write_atomic(path: str, text: str) -> None:
    """Readers see the old or the new file, never half of one."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def has_data(data_dir: str) -> bool:
    """Engine-neutral: etcd and Xline both leave files in a used data dir."""
    try:
        return any(os.scandir(data_dir))
    except FileNotFoundError:
        return False
