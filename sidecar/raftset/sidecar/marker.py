"""The member marker beside the data dir (moving data aside is raftset.sidecar.datadir).

The marker records which member the data dir belongs to, so that a refilled ordinal
whose PVC outlived its member (a stale PVC) is recognised and started clean.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Marker:
    member_id: int
    name: str
    peer_url: str
    initial_cluster: dict[str, str] = field(default_factory=dict)
    # The quorum-loss recovery (QuorumLossRecord.id) this member already restarted alone for:
    # a restarted survivor must never force a new cluster twice.
    recovered: str = ""

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
            recovered=str(doc.get("recovered") or ""),
        )


def remembered(old: Marker | None, member_id: int, name: str, peer_url: str, *,
               cluster: dict[str, str] | None = None, recovered: str | None = None) -> Marker:
    """The marker for `member_id`. What is not given carries over from `old`: its cluster map,
    and its recovery id only for the same member (a new member never restarted alone)."""
    return Marker(member_id, name, peer_url,
                  dict(cluster) if cluster is not None else (dict(old.initial_cluster) if old else {}),
                  recovered if recovered is not None
                  else (old.recovered if old is not None and old.member_id == member_id else ""))


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
