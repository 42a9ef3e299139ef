"""The operator's Prometheus metrics (prometheus_client), served on --metrics-address.

Counters are counted by the reconcile (how many, how long, which scale steps, which
refusals, leader changes). The per-cluster gauges come from the last status each reconcile
published, read at scrape time through the pure `cluster_families`: a scrape shows exactly
what `kubectl get` shows, and a deleted cluster's series go with `forget`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from raftset.operator.pure.events import Event
from raftset.times import parse_rfc3339

Key = tuple[str, str]  # (namespace, cluster name)
CLUSTER_LABELS = ["namespace", "cluster", "kind"]

# Label values of raftset_operator_reconciles_total{result}.
RESULT_OK = "ok"  # rendered and applied (or checked), whatever the cluster's health
RESULT_INVALID = "invalid"  # the spec was refused
RESULT_FAILED = "failed"  # a problem kept it from finishing (an API write failed, an API is missing)
RESULT_ERROR = "error"  # an exception escaped: kopf retries

# The Degraded reasons that are a refusal of what the user asked (not a fault of the cluster).
REFUSALS = frozenset({"InvalidSpec", "VersionChangeRefused", "StorageTooSmall", "WorkloadAPIMissing",
                      "ScaleRefused", "WorkloadKindNotEnabled"})


def last_backup(status: Mapping[str, Any]) -> float | None:
    """When the last backup succeeded (`status.backup.lastSuccess.time`), as a Unix time."""
    moment = parse_rfc3339(((status.get("backup") or {}).get("lastSuccess") or {}).get("time"))
    return moment.timestamp() if moment else None


def cluster_families(observed: Mapping[Key, tuple[str, Mapping[str, Any]]]) -> list[Metric]:
    """The per-cluster gauges, from (kind, status) of every cluster this operator reconciles."""
    def family(name: str, doc: str, extra: Iterable[str] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=[*CLUSTER_LABELS, *extra])

    members = family("raftset_cluster_members", "Members in Raft (or reporting a heartbeat).")
    voters = family("raftset_cluster_voters", "Voting members in Raft.")
    learners = family("raftset_cluster_learners", "Learners in Raft: members still catching up.")
    healthy = family("raftset_cluster_healthy_members", "Members whose sidecar reports them healthy.")
    healthy_voters = family("raftset_cluster_healthy_voters", "Voting members in Raft that report healthy.")
    leader = family("raftset_cluster_has_leader", "1 while a member reports itself leader.")
    replicas = family("raftset_cluster_replicas", "Pods the workload runs.")
    ready = family("raftset_cluster_ready_replicas", "Pods the workload reports ready.")
    condition = family("raftset_cluster_condition", "1 while the condition is True, 0 while False.",
                       ["condition", "reason"])
    member_healthy = family("raftset_cluster_member_healthy", "1 while the member reports healthy.",
                            ["member", "role"])
    lag = family("raftset_cluster_member_index_lag", "How far the member's raft index trails the leader's.",
                 ["member"])
    backup = family("raftset_cluster_last_backup_timestamp_seconds", "When the last backup succeeded.")
    for (namespace, name), (kind, st) in sorted(observed.items()):
        base = [namespace, name, kind]
        rows = list(st.get("members") or [])
        in_raft = [r for r in rows if r.get("inRaft", True)]
        members.add_metric(base, len(rows))
        voters.add_metric(base, sum(1 for r in in_raft if not r.get("learner")))
        learners.add_metric(base, sum(1 for r in in_raft if r.get("learner")))
        healthy.add_metric(base, sum(1 for r in rows if r.get("healthy")))
        healthy_voters.add_metric(base, sum(1 for r in in_raft if not r.get("learner") and r.get("healthy")))
        leader.add_metric(base, 1.0 if st.get("leader") else 0.0)
        if "replicas" in st:
            replicas.add_metric(base, float(st["replicas"]))
            ready.add_metric(base, float(st.get("readyReplicas", 0)))
        for c in st.get("conditions") or []:
            condition.add_metric([*base, c.get("type", ""), c.get("reason", "")],
                                 1.0 if c.get("status") == "True" else 0.0)
        for r in rows:
            member_healthy.add_metric([*base, r.get("name", ""), r.get("role", "")], 1.0 if r.get("healthy") else 0.0)
            if "indexLag" in r:
                lag.add_metric([*base, r.get("name", "")], float(r["indexLag"]))
        when = last_backup(st)
        if when is not None:
            backup.add_metric(base, when)
    return [members, voters, learners, healthy, healthy_voters, leader, replicas, ready, condition, member_healthy, lag, backup]


class Clusters(Collector):
    """The last status published per cluster, collected at scrape time."""

    def __init__(self) -> None:
        self.observed: dict[Key, tuple[str, Mapping[str, Any]]] = {}

    def observe(self, key: Key, kind: str, status: Mapping[str, Any]) -> None:
        self.observed[key] = (kind, status)

    def forget(self, key: Key) -> None:
        self.observed.pop(key, None)

    def collect(self) -> Iterable[Metric]:
        return cluster_families(dict(self.observed))


class OperatorMetrics:
    """Every metric of one operator process, in its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.reconciles = Counter("raftset_operator_reconciles", "Reconciles by kind and result.",
                                  ["kind", "result"], registry=self.registry)
        self.duration = Histogram("raftset_operator_reconcile_duration_seconds", "How long a reconcile took.",
                                  ["kind"], registry=self.registry,
                                  buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.scale_steps = Counter("raftset_operator_scale_steps", "Steps taken on the workload, by kind of step.",
                                   ["kind", "step"], registry=self.registry)
        self.refusals = Counter("raftset_operator_refusals",
                                "Refusals of a spec or a step, by reason, counted once each time one is announced.",
                                ["kind", "reason"], registry=self.registry)
        # Per cluster, so that a test (or an SRE) can see that this cluster's decisions were taken again.
        self.cluster_reconciles = Counter("raftset_cluster_reconciles",
                                          "Reconciles of the cluster that ran to their end, whatever they decided.",
                                          CLUSTER_LABELS, registry=self.registry)
        self.leader_changes = Counter("raftset_cluster_leader_changes", "Leader changes the operator saw.",
                                      CLUSTER_LABELS, registry=self.registry)
        self.watch_forbidden = Gauge("raftset_operator_watch_forbidden",
                                     "1 for each resource the operator may not list and watch, and so does not watch.",
                                     ["resource"], registry=self.registry)
        self.lease_relists = Gauge("raftset_operator_lease_relists",
                                   "Lists of the clusters' Leases after the first: each a watch gap (410 or a broken stream).",
                                   registry=self.registry)
        self.clusters = Clusters()
        self.registry.register(self.clusters)

    def announced(self, key: Key, kind: str, announcements: Iterable[Event]) -> None:
        """Count what status.announcements says once: leader changes and refusals."""
        for _type, reason, _message in announcements:
            if reason == "LeaderChanged":
                self.leader_changes.labels(key[0], key[1], kind).inc()
            elif reason in REFUSALS:
                self.refusals.labels(kind, reason).inc()

    def serve(self, address: str) -> None:
        """Serve /metrics on host:port in a thread of its own; "" serves nothing."""
        if not address:
            return
        host, _, port = address.rpartition(":")
        start_http_server(int(port), addr=host or "0.0.0.0", registry=self.registry)
