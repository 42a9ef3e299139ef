"""A few Prometheus metrics in the text exposition format (no client library needed)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from raftset import contract

from raftset.sidecar.heartbeat import Heartbeat


class Metrics:
    def __init__(self) -> None:
        # (operation, result) -> count; operation in add|promote|remove|move_leader|clean_remove
        self.membership: Counter[tuple[str, str]] = Counter()
        self.lease_writes: Counter[str] = Counter()  # ok | error
        self.join_attempts = 0

    def count(self, operation: str, ok: bool) -> None:
        self.membership[(operation, "ok" if ok else "error")] += 1

    def render(self, hb: Heartbeat, *, started: bool, ready: bool, labels: Mapping[str, str]) -> str:
        base = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))

        def sample(name: str, value: float, extra: str = "") -> str:
            inner = ",".join(p for p in (base, extra) if p)
            return f"{name}{{{inner}}} {value:g}"

        lines = [
            "# HELP raftset_sidecar_startup_written 1 once the store's startup file is written.",
            "# TYPE raftset_sidecar_startup_written gauge",
            sample("raftset_sidecar_startup_written", int(started)),
            "# HELP raftset_member_ready 1 while the store serves and the member votes.",
            "# TYPE raftset_member_ready gauge",
            sample("raftset_member_ready", int(ready)),
            "# HELP raftset_member_healthy 1 while the local member answers and sees a leader.",
            "# TYPE raftset_member_healthy gauge",
            sample("raftset_member_healthy", int(hb.healthy)),
            "# HELP raftset_member_role The local member's role (1 for the current one).",
            "# TYPE raftset_member_role gauge",
            *(sample("raftset_member_role", int(hb.role == r), f'role="{r}"') for r in contract.ROLES),
            "# HELP raftset_member_raft_term Raft term seen by the local member.",
            "# TYPE raftset_member_raft_term gauge",
            sample("raftset_member_raft_term", hb.raft_term),
            "# HELP raftset_member_raft_index Raft index of the local member.",
            "# TYPE raftset_member_raft_index gauge",
            sample("raftset_member_raft_index", hb.raft_index),
            "# HELP raftset_sidecar_join_attempts_total Join decisions taken.",
            "# TYPE raftset_sidecar_join_attempts_total counter",
            sample("raftset_sidecar_join_attempts_total", self.join_attempts),
            "# HELP raftset_sidecar_membership_changes_total Membership calls by operation and result.",
            "# TYPE raftset_sidecar_membership_changes_total counter",
            *(
                sample("raftset_sidecar_membership_changes_total", n, f'operation="{op}",result="{res}"')
                for (op, res), n in sorted(self.membership.items())
            ),
            "# HELP raftset_sidecar_lease_writes_total Heartbeat Lease writes by result.",
            "# TYPE raftset_sidecar_lease_writes_total counter",
            *(
                sample("raftset_sidecar_lease_writes_total", n, f'result="{res}"')
                for res, n in sorted(self.lease_writes.items())
            ),
        ]
        return "\n".join(lines) + "\n"
