"""The sidecar's Prometheus metrics (prometheus_client), served on GET /metrics.

Counters are counted where things happen (join, leave, clean, membership calls, Lease
writes, maintenance actions). What describes the member now (role, leader, heartbeat age,
index lag) is read from the shared State at scrape time by `GaugeCollector`, through the pure
`state_samples` (pure/metrics.py), so that a scrape never shows a value older than the last poll. So are the
loop error counters: supervision already counts them per loop (LoopHealth), they are not
counted a second time here.

Every series is per pod: the PodMonitor of the monitoring kit adds `namespace`, `pod` and
`cluster` (from the pod's `app.kubernetes.io/instance` label), so none is repeated here.
Each sidecar has its own registry (tests run several sidecars in one process).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from raftset.sidecar.pure.corruption import CHECK_OUTCOMES
from raftset.sidecar.pure.metrics import Family, MemberGauges, state_samples
from raftset.sidecar.pure.state import State

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Label values of raftset_sidecar_outcomes_total{step}: what each lifecycle step ended with.
STEP_JOIN = "join"
STEP_LEAVE = "leave"
STEP_CLEAN = "clean"
STEP_MAINTENANCE = "maintenance"
STEP_BACKUP = "backup"
STEP_HASH_CHECK = "hash_check"  # the leader's periodic HashKV comparison (corruption.check_outcome)


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


def prometheus_family(family: Family) -> Metric:
    """A plain family (pure/metrics.py) as prometheus_client's."""
    kind = GaugeMetricFamily if family.kind == "gauge" else CounterMetricFamily
    if not family.labels and family.samples:
        return kind(family.name, family.doc, value=family.samples[0].value)
    out = kind(family.name, family.doc, labels=list(family.labels))
    for sample in family.samples:
        out.add_metric([sample.labels[name] for name in family.labels], sample.value)
    return out


class GaugeCollector(Collector):
    """Asks `read` for the state at every scrape."""

    def __init__(self, read: Callable[[], MemberGauges]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        return [prometheus_family(f) for f in state_samples(self._read())]


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
        self._scratch_copies = Counter(
            "raftset_sidecar_scratch_removed", "Copies the store abandoned in its scratch volume, removed "
            "(Xline's snapshot copies: docs/engines.md).", registry=self.registry)
        self._scratch_bytes = Counter(
            "raftset_sidecar_scratch_removed_bytes", "Bytes of those copies.", registry=self.registry)

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

    def scratch_removed(self, copies: int, size: int) -> None:
        self._scratch_copies.inc(copies)
        self._scratch_bytes.inc(size)

    def render(self) -> bytes:
        return generate_latest(self.registry)
