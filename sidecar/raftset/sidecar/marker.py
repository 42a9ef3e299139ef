"""The member marker beside the data dir, and moving a stale data dir aside.

The marker records which member the data dir belongs to, so that a refilled ordinal
whose PVC outlived its member (a stale PVC) is recognised and started clean.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Marker:
    member_id: int
    name: str
    peer_url: str
    initial_cluster: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        doc = asdict(self)
        doc["member_id"] = f"{self.member_id:x}"
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Marker:
        doc = json.loads(text)
        return cls(
            member_id=int(doc["member_id"], 16),
            name=str(doc["name"]),
            peer_url=str(doc["peer_url"]),
            initial_cluster={str(k): str(v) for k, v in (doc.get("initial_cluster") or {}).items()},
        )


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


def move_aside(data_dir: str, marker_path: str) -> str:
    """Rename the data dir (and its marker) to `<dir>.stale-<time>`; keep only the newest."""
    base = data_dir.rstrip("/")
    parent = os.path.dirname(base) or "."
    prefix = os.path.basename(base) + ".stale-"
    for old in os.listdir(parent):
        if old.startswith(prefix):
            target = os.path.join(parent, old)
            if os.path.isdir(target):
                shutil.rmtree(target, ignore_errors=True)
            else:
                os.unlink(target)
    dest = f"{base}.stale-{int(time.time())}"
    if os.path.exists(base):
        os.replace(base, dest)
    if os.path.exists(marker_path):
        os.replace(marker_path, f"{dest}.member.json")
    return dest
