"""The sidecar's scrape-time gauges as plain data: what the member looks like now, as metric families
(the Prometheus shell: raftset.sidecar.metrics)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from raftset import contract
from raftset.sidecar.pure.corruption import CorruptionRecord


@dataclass(frozen=True)
class MemberGauges:
    """What the member looks like now, as the sidecar knows it."""

    role: str  # contract.ROLES
    leader_id: str  # hex, "" without a leader
    healthy: bool
    ready: bool
    startup_written: bool
    raft_term: int
    raft_index: int
    heartbeat_age: float | None  # seconds since the heartbeat Lease was last written; None: never
    db_size: int | None  # bytes, from the local Status
    db_size_in_use: int | None
    alarms: tuple[str, ...]  # active alarm types of this member (NOSPACE, CORRUPT)
    index_lags: Mapping[str, int]  # member pod (or hex id) -> raft index lag; the leader's sidecar only
    loop_errors: Mapping[tuple[str, str], int]  # (loop, expected|unexpected) -> failed rounds (Loops.counters)
    corruption: CorruptionRecord | None = None  # the leader's standing verdict on the local member (corruption.suspicion)


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Family:
    """One metric family of a scrape; the shell turns it into prometheus_client's."""

    name: str
    doc: str
    kind: Literal["gauge", "counter"]
    labels: tuple[str, ...]
    samples: list[Sample]


def judged_labels(found: CorruptionRecord) -> list[str]:
    """(verdict, source) of raftset_member_judged_corrupt: an alert tells a self-repairing finding from a doubt."""
    return ["replace" if found.replace else "unconfirmed", "alarm" if found.alarm else "hash_check"]


def state_samples(state: MemberGauges) -> list[Family]:
    """The gauges (and the loop error counters) of one scrape, from plain data."""
    def gauge(name: str, doc: str, value: float | None = None, labels: Iterable[str] = (),
              samples: Iterable[tuple[list[str], float]] = ()) -> Family:
        labels = tuple(labels)
        found = [Sample(dict(zip(labels, values, strict=True)), v) for values, v in samples]
        return Family(name, doc, "gauge", labels, [Sample({}, value)] if value is not None else found)

    out: list[Family] = [
        gauge("raftset_sidecar_startup_written", "1 once the store's startup file is written.",
              float(state.startup_written)),
        gauge("raftset_member_ready", "1 while the member votes and a linearizable read goes through it.", float(state.ready)),
        gauge("raftset_member_healthy", "1 while the local member answers and sees a leader.",
              float(state.healthy)),
        gauge("raftset_member_role", "The local member's role (1 for the current one).", labels=["role"],
              samples=[([r], float(state.role == r)) for r in contract.ROLES]),
        gauge("raftset_member_leader", "1 for the member id (hex) the local member follows as leader.",
              labels=["leader_id"], samples=[([state.leader_id], 1.0)] if state.leader_id else []),
        gauge("raftset_member_raft_term", "Raft term seen by the local member.", float(state.raft_term)),
        gauge("raftset_member_raft_index", "Raft index of the local member.", float(state.raft_index)),
        gauge("raftset_member_alarm", "1 for each alarm the cluster reports on the local member.",
              labels=["alarm"], samples=[([a], 1.0) for a in state.alarms]),
        gauge("raftset_member_raft_index_lag",
              "How far each member's raft index trails the leader's, as the leader's sidecar last saw it.",
              labels=["member"], samples=[([m], float(lag)) for m, lag in sorted(state.index_lags.items())]),
        gauge("raftset_member_judged_corrupt",
              "1 while the leader's verdict that the local member's data is corrupt stands: verdict replace "
              "(certain) or unconfirmed (a person decides), source alarm (CORRUPT) or hash_check.",
              labels=["verdict", "source"],
              samples=[(judged_labels(state.corruption), 1.0)] if state.corruption is not None else []),
    ]
    errors = Family("raftset_sidecar_loop_errors", "Rounds of a periodic loop that failed and were retried.",
                    "counter", ("loop",), [])
    unexpected = Family("raftset_sidecar_loop_restarts", "Rounds of a periodic loop that failed unexpectedly (a bug) "
                        "and were retried after a backoff.", "counter", ("loop",), [])
    for loop in sorted({loop for loop, _ in state.loop_errors}):
        bugs = state.loop_errors.get((loop, "unexpected"), 0)
        errors.samples.append(Sample({"loop": loop}, float(state.loop_errors.get((loop, "expected"), 0) + bugs)))
        unexpected.samples.append(Sample({"loop": loop}, float(bugs)))
    out += [errors, unexpected]
    if state.heartbeat_age is not None:
        out.append(gauge("raftset_sidecar_heartbeat_age_seconds",
                         "Seconds since this sidecar last wrote its heartbeat Lease.", state.heartbeat_age))
    if state.db_size is not None:
        out.append(gauge("raftset_member_db_size_bytes", "Size of the local member's backend file.",
                         float(state.db_size)))
    if state.db_size_in_use is not None:
        out.append(gauge("raftset_member_db_size_in_use_bytes",
                         "Bytes of the local member's backend file in use (the rest defragmentation frees).",
                         float(state.db_size_in_use)))
    return out
