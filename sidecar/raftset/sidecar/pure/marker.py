"""The member marker beside the data dir: which member the data dir belongs to (files: raftset.sidecar.io.marker).

It lets a refilled ordinal whose PVC outlived its member (a stale PVC) be recognised and started clean.
"""

from __future__ import annotations

import json
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
