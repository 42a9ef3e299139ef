"""The sidecar's Prometheus metrics (prometheus_client), served on GET /metrics.

Counters are counted where things happen (join, leave, clean, membership calls, Lease
writes, maintenance actions). What describes the member now (role, leader, heartbeat age,
index lag) is read from the shared State at scrape time by `GaugeCollector`, through the pure
`state_samples`, so that a scrape never shows a value older than the last poll. So are the
loop error counters: supervision already counts them per loop (LoopHealth), they are not
counted a second time here.

Every series is per pod: the PodMonitor of the monitoring kit adds `namespace`, `pod` and
`cluster` (from the pod's `app.kubernetes.io/instance` label), so none is repeated here.
Each sidecar has its own registry (tests run several sidecars in one process).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from raftset import contract
from raftset.sidecar.pure.corruption import CHECK_OUTCOMES, CorruptionRecord
from raftset.sidecar.pure.state import State

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Label values of raftset_sidecar_outcomes_total{step}: what each lifecycle step ended with.
STEP_JOIN = "join"
STEP_LEAVE = "leave"
STEP_CLEAN = "clean"
STEP_MAINTENANCE = "maintenance"
STEP_BACKUP = "backup"
STEP_HASH_CHECK = "hash_check"  # the leader's periodic HashKV comparison (corruption.check_outcome)


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


def member_gauges(state: State, loop_errors: Mapping[tuple[str, str], int]) -> MemberGauges:
    """The member as a scrape shows it, from what the shells last saw."""
    st, written = state.status, state.heartbeat_written_at
    return MemberGauges(
        role=state.heartbeat.role, leader_id=f"{st.leader:x}" if st is not None and st.leader else "",
        healthy=state.heartbeat.healthy, ready=state.ready, startup_written=state.startup_written,
        raft_term=state.heartbeat.raft_term, raft_index=state.heartbeat.raft_index,
        heartbeat_age=None if written is None else time.monotonic() - written,
        db_size=st.db_size if st is not None else None,
        db_size_in_use=st.db_size_in_use if st is not None else None,
        alarms=state.alarms, index_lags=state.index_lags, loop_errors=loop_errors,
        corruption=state.corruption,
    )


def judged_labels(found: CorruptionRecord) -> list[str]:
    """(verdict, source) of raftset_member_judged_corrupt: an alert tells a self-repairing finding from a doubt."""
    return ["replace" if found.replace else "unconfirmed", "alarm" if found.alarm else "hash_check"]


def state_samples(state: MemberGauges) -> list[Metric]:
    """The gauges of one scrape, from plain data."""
    def gauge(name: str, doc: str, value: float | None = None, labels: Iterable[str] = (),
              samples: Iterable[tuple[list[str], float]] = ()) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, value=value, labels=list(labels) or None)
        for label_values, v in samples:
            family.add_metric(label_values, v)
        return family

    out: list[Metric] = [
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
    errors = CounterMetricFamily("raftset_sidecar_loop_errors",
                                 "Rounds of a periodic loop that failed and were retried.", labels=["loop"])
    unexpected = CounterMetricFamily("raftset_sidecar_loop_restarts",
                                     "Rounds of a periodic loop that failed unexpectedly (a bug) and were "
                                     "retried after a backoff.", labels=["loop"])
    for loop in sorted({loop for loop, _ in state.loop_errors}):
        bugs = state.loop_errors.get((loop, "unexpected"), 0)
        errors.add_metric([loop], float(state.loop_errors.get((loop, "expected"), 0) + bugs))
        unexpected.add_metric([loop], float(bugs))
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


class GaugeCollector(Collector):
    """Asks `read` for the state at every scrape."""

    def __init__(self, read: Callable[[], MemberGauges]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        return state_samples(self._read())


class Metrics:
    """The counters of one sidecar, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._membership = Counter(
            "raftset_sidecar_membership_changes", "Membership calls by operation and result.",
            ["operation", "result"], registry=self.registry)
        self._lease_writes = Counter(
            "raftset_sidecar_lease_writes", "Heartbeat Lease writes by result.", ["result"], registry=self.registry)
        self._join_attempts = Counter(
            "raftset_sidecar_join_attempts", "Join decisions taken.", registry=self.registry)
        self._outcomes = Counter(
            "raftset_sidecar_outcomes", "How each join, leave, clean, maintenance and backup round ended.",
            ["step", "outcome"], registry=self.registry)
        for found in CHECK_OUTCOMES:  # from 0, so that increase() sees a leader's first finding
            self._outcomes.labels(STEP_HASH_CHECK, found)
        self._aborted_uploads = Counter(
            "raftset_sidecar_backup_uploads_aborted",
            "Abandoned incomplete backup uploads (a killed taker's) this sidecar aborted.", registry=self.registry)

    def watch(self, read: Callable[[], MemberGauges]) -> None:
        """Register the scrape-time state of the member (the app calls this once)."""
        self.registry.register(GaugeCollector(read))

    def count(self, operation: str, ok: bool) -> None:
        """One membership call: add | promote | remove | move_leader | clean_remove | membership_write (a Lease)."""
        self._membership.labels(operation, "ok" if ok else "error").inc()

    def lease_write(self, ok: bool) -> None:
        self._lease_writes.labels("ok" if ok else "error").inc()

    def join_attempt(self) -> None:
        self._join_attempts.inc()

    def outcome(self, step: str, outcome: str) -> None:
        """What one round of `step` (STEP_*) ended with: the decision's action, or `error`."""
        self._outcomes.labels(step, outcome).inc()

    def upload_aborted(self) -> None:
        self._aborted_uploads.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
