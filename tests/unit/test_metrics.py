"""Metric names and labels of the sidecar and the operator: what dashboards and alerts are written against."""

from __future__ import annotations

from datetime import datetime, timezone

import dataclasses

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from raftset import backups, contract, engines
from raftset.contract import SidecarEnv
from raftset.engines import StartupConfig
from raftset.operator import manifests
from raftset.operator.metrics import REFUSALS, OperatorMetrics, cluster_families, last_backup
from raftset.sidecar import metrics as sidecar_metrics
from raftset.sidecar.corruption import Record
from raftset.sidecar.metrics import Metrics, State, state_samples
from tests.unit.builders import cluster

pytestmark = pytest.mark.unit


def parsed(text: str | bytes) -> dict[str, list[tuple[dict[str, str], float]]]:
    """family name -> [(labels, value)] of every sample (counters keep their _total name)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text.decode() if isinstance(text, bytes) else text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


STATE = State(role="follower", leader_id="8e9e05c52164694d", healthy=True, ready=True, startup_written=True,
              raft_term=3, raft_index=120, heartbeat_age=4.5, db_size=2048, db_size_in_use=1024,
              alarms=("NOSPACE",), index_lags={"demo-1": 0, "demo-2": 7},
              loop_errors={("heartbeat", "expected"): 2, ("heartbeat", "unexpected"): 0,
                           ("clean", "expected"): 0, ("clean", "unexpected"): 1},
              corruption=Record("c", True, "the hash check (no alarm) finds ...", alarm=False))


def test_sidecar_counters_and_state_are_exposed_under_their_names() -> None:
    m = Metrics()
    m.watch(lambda: STATE)
    m.count("add", True)
    m.count("promote", False)
    m.lease_write(True)
    m.join_attempt()
    m.outcome(sidecar_metrics.STEP_JOIN, "add_learner")
    m.outcome(sidecar_metrics.STEP_LEAVE, "kept")
    m.outcome(sidecar_metrics.STEP_CLEAN, "removed")
    m.upload_aborted()
    m.upload_aborted()
    got = parsed(m.render())
    assert got["raftset_sidecar_backup_uploads_aborted_total"] == [({}, 2.0)]
    assert got["raftset_sidecar_membership_changes_total"] == [
        ({"operation": "add", "result": "ok"}, 1.0), ({"operation": "promote", "result": "error"}, 1.0)]
    assert got["raftset_sidecar_lease_writes_total"] == [({"result": "ok"}, 1.0)]
    assert got["raftset_sidecar_join_attempts_total"] == [({}, 1.0)]
    assert ({"step": "join", "outcome": "add_learner"}, 1.0) in got["raftset_sidecar_outcomes_total"]
    assert ({"step": "leave", "outcome": "kept"}, 1.0) in got["raftset_sidecar_outcomes_total"]
    assert ({"step": "clean", "outcome": "removed"}, 1.0) in got["raftset_sidecar_outcomes_total"]
    # From supervision's own counts (Loops.counters), read at scrape time: every failed round, and the
    # unexpected ones (retried after a backoff).
    assert got["raftset_sidecar_loop_errors_total"] == [({"loop": "clean"}, 1.0), ({"loop": "heartbeat"}, 2.0)]
    assert got["raftset_sidecar_loop_restarts_total"] == [({"loop": "clean"}, 1.0), ({"loop": "heartbeat"}, 0.0)]
    assert got["raftset_member_role"] == [({"role": r}, float(r == "follower"))
                                          for r in ("leader", "follower", "learner", "unknown")]
    assert got["raftset_member_leader"] == [({"leader_id": "8e9e05c52164694d"}, 1.0)]
    assert got["raftset_sidecar_heartbeat_age_seconds"] == [({}, 4.5)]
    assert got["raftset_member_raft_index_lag"] == [({"member": "demo-1"}, 0.0), ({"member": "demo-2"}, 7.0)]
    assert got["raftset_member_alarm"] == [({"alarm": "NOSPACE"}, 1.0)]
    assert got["raftset_member_db_size_bytes"] == [({}, 2048.0)]
    assert got["raftset_member_db_size_in_use_bytes"] == [({}, 1024.0)]
    for name in ("raftset_member_ready", "raftset_member_healthy", "raftset_sidecar_startup_written"):
        assert got[name] == [({}, 1.0)]
    assert got["raftset_member_raft_term"] == [({}, 3.0)] and got["raftset_member_raft_index"] == [({}, 120.0)]


def test_an_unknown_member_shows_no_leader_no_age_and_no_sizes() -> None:
    blank = State(role="unknown", leader_id="", healthy=False, ready=False, startup_written=False,
                  raft_term=0, raft_index=0, heartbeat_age=None, db_size=None, db_size_in_use=None,
                  alarms=(), index_lags={}, loop_errors={})
    names = {f.name: f for f in state_samples(blank)}
    assert names["raftset_member_leader"].samples == []
    assert "raftset_sidecar_heartbeat_age_seconds" not in names
    assert "raftset_member_db_size_bytes" not in names
    assert [s.value for s in names["raftset_member_role"].samples if s.labels["role"] == "unknown"] == [1.0]


@pytest.mark.parametrize(("found", "labels"), [
    (Record("c", True, "r", alarm=False), {"verdict": "replace", "source": "hash_check"}),
    (Record("c", False, "r", alarm=False), {"verdict": "unconfirmed", "source": "hash_check"}),
    (Record("c", True, "r"), {"verdict": "replace", "source": "alarm"}),
])
def test_a_standing_corruption_verdict_is_one_series_and_none_is_none(found: Record, labels) -> None:
    m = Metrics()
    m.watch(lambda: dataclasses.replace(STATE, corruption=found))
    m.outcome(sidecar_metrics.STEP_HASH_CHECK, "differs")
    got = parsed(m.render())
    assert got["raftset_member_judged_corrupt"] == [(labels, 1.0)]
    # Every outcome of the hash check is there from 0: increase() sees a leader's first finding.
    assert got["raftset_sidecar_outcomes_total"] == [({"step": "hash_check", "outcome": o}, float(o == "differs"))
                                                     for o in ("agree", "differs", "unconfirmed", "not_compared")]
    unjudged = {f.name: f for f in state_samples(dataclasses.replace(STATE, corruption=None))}
    assert unjudged["raftset_member_judged_corrupt"].samples == []


def test_two_sidecars_in_one_process_do_not_share_metrics() -> None:
    a, b = Metrics(), Metrics()
    a.join_attempt()
    assert parsed(b.render())["raftset_sidecar_join_attempts_total"] == [({}, 0.0)]


STATUS = {
    "leader": "demo-0",
    "replicas": 3,
    "readyReplicas": 2,
    "conditions": [
        {"type": "Available", "status": "True", "reason": "QuorumHealthy"},
        {"type": "Degraded", "status": "False", "reason": "AsExpected"},
    ],
    "members": [
        {"name": "demo-0", "id": "a", "role": "leader", "learner": False, "inRaft": True, "healthy": True,
         "indexLag": 0},
        {"name": "demo-1", "id": "b", "role": "follower", "learner": False, "inRaft": True, "healthy": False,
         "indexLag": 12},
        {"name": "demo-2", "id": "c", "role": "learner", "learner": True, "inRaft": True, "healthy": True},
        {"name": "demo-3", "id": "d", "role": "follower", "learner": False, "inRaft": False, "healthy": True},
    ],
    # status.backup as the operator publishes it
    "backup": backups.status_of(backups.Record(last_success=backups.Manifest(
        key="p/ns/demo/snapshot-20260101T000000Z-r9.db", sha256="ab" * 32, size=1, revision=9,
        taken="2026-01-01T00:00:00Z", engine="etcd", cluster="demo", namespace="ns"))),
}
BASE = {"namespace": "ns", "cluster": "demo", "kind": "EtcdCluster"}


def test_cluster_gauges_follow_the_published_status() -> None:
    got = {f.name: [(s.labels, s.value) for s in f.samples]
           for f in cluster_families({("ns", "demo"): ("EtcdCluster", STATUS)})}
    assert got["raftset_cluster_members"] == [(BASE, 4.0)]
    assert got["raftset_cluster_voters"] == [(BASE, 2.0)]  # demo-3 is not in Raft, demo-2 learns
    assert got["raftset_cluster_learners"] == [(BASE, 1.0)]
    assert got["raftset_cluster_healthy_members"] == [(BASE, 3.0)]
    assert got["raftset_cluster_healthy_voters"] == [(BASE, 1.0)]  # demo-0; demo-1 is not healthy
    assert got["raftset_cluster_has_leader"] == [(BASE, 1.0)]
    assert got["raftset_cluster_replicas"] == [(BASE, 3.0)]
    assert got["raftset_cluster_ready_replicas"] == [(BASE, 2.0)]
    assert got["raftset_cluster_condition"] == [
        ({**BASE, "condition": "Available", "reason": "QuorumHealthy"}, 1.0),
        ({**BASE, "condition": "Degraded", "reason": "AsExpected"}, 0.0)]
    assert ({**BASE, "member": "demo-1", "role": "follower"}, 0.0) in got["raftset_cluster_member_healthy"]
    assert got["raftset_cluster_member_index_lag"] == [({**BASE, "member": "demo-0"}, 0.0),
                                                       ({**BASE, "member": "demo-1"}, 12.0)]
    assert got["raftset_cluster_last_backup_timestamp_seconds"] == [
        (BASE, datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp())]


def test_no_backup_no_backup_series() -> None:
    assert last_backup({}) is None and last_backup({"backup": {"lastSuccess": {"time": "garbage"}}}) is None
    assert last_backup({"backup": {"lastFailure": {"time": "2026-01-01T00:00:00Z"}}}) is None
    got = {f.name: f.samples for f in cluster_families({("ns", "x"): ("XlineCluster", {"leader": ""})})}
    assert got["raftset_cluster_last_backup_timestamp_seconds"] == []
    assert got["raftset_cluster_has_leader"][0].value == 0.0


def test_operator_counters_and_forgetting_a_cluster() -> None:
    m = OperatorMetrics()
    m.reconciles.labels("EtcdCluster", "ok").inc()
    m.cluster_reconciles.labels("ns", "demo", "EtcdCluster").inc()
    m.duration.labels("EtcdCluster").observe(0.02)
    m.scale_steps.labels("EtcdCluster", "scale-in").inc()
    m.announced(("ns", "demo"), "EtcdCluster", [
        ("Normal", "LeaderChanged", "leader moved"), ("Warning", "ScaleRefused", "no"),
        ("Warning", "NoLeader", "not a refusal"), ("Warning", "TLSDisabled", "not a refusal")])
    m.clusters.observe(("ns", "demo"), "EtcdCluster", STATUS)
    got = parsed(generate_latest(m.registry))
    assert got["raftset_operator_reconciles_total"] == [({"kind": "EtcdCluster", "result": "ok"}, 1.0)]
    assert got["raftset_operator_reconcile_duration_seconds_count"] == [({"kind": "EtcdCluster"}, 1.0)]
    assert got["raftset_operator_scale_steps_total"] == [({"kind": "EtcdCluster", "step": "scale-in"}, 1.0)]
    assert got["raftset_operator_refusals_total"] == [({"kind": "EtcdCluster", "reason": "ScaleRefused"}, 1.0)]
    assert got["raftset_cluster_leader_changes_total"] == [(BASE, 1.0)]
    assert got["raftset_cluster_reconciles_total"] == [(BASE, 1.0)]
    assert got["raftset_cluster_members"] == [(BASE, 4.0)]
    m.clusters.forget(("ns", "demo"))
    assert "raftset_cluster_members" not in parsed(generate_latest(m.registry))
    assert {"InvalidSpec", "ScaleRefused", "StorageTooSmall"} <= REFUSALS


def test_the_store_serves_its_own_metrics_behind_the_metrics_service() -> None:
    cfg = StartupConfig(name="demo-0", data_dir="/d", peer_url="http://p:2380", client_url="http://c:2379",
                        listen_peer_url="http://0.0.0.0:2380", listen_client_url="http://0.0.0.0:2379",
                        initial_cluster={"demo-0": "http://p:2380"}, state="new", cluster_token="t",
                        listen_metrics_url="http://0.0.0.0:2381")
    assert yaml.safe_load(engines.ETCD.render_startup(cfg))["listen-metrics-urls"] == "http://0.0.0.0:2381"
    assert "--metrics-port 2381" in engines.XLINE.render_startup(cfg)
    bare = dataclasses.replace(cfg, listen_metrics_url="")
    assert "listen-metrics-urls" not in yaml.safe_load(engines.ETCD.render_startup(bare))
    assert "--metrics-port" not in engines.XLINE.render_startup(bare)
    assert engines.ETCD.refused_options({"listen-metrics-urls": "x"}) == ["listen-metrics-urls"]
    assert engines.XLINE.refused_options({"metrics-port": "1"}) == ["metrics-port"]

    c = cluster()
    env = {e["name"]: e.get("value") for e in manifests.sidecar_env(c)}
    assert env[SidecarEnv.LISTEN_METRICS_URL] == f"http://0.0.0.0:{contract.METRICS_PORT}"
    store = manifests.store_container(c)
    assert {"name": "metrics", "containerPort": contract.METRICS_PORT} in store["ports"]
    service = manifests.metrics_service(c)
    assert service["metadata"]["name"] == contract.metrics_service_name(c.name) == f"{c.name}-metrics"
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["metadata"]["labels"][contract.LABEL_METRICS] == "true"
    assert service["spec"]["selector"] == contract.selector_labels(c.name)
