"""`kubectl raftset`'s pure parts: the views built from API objects, their text, and the command line."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from raftset import backups, contract
from raftset.plugin import cli
from raftset.plugin.pure import text
from raftset.plugin.pure import views
from raftset.plugin.io.kube import UsageError, engine_of

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden" / "plugin_status.txt"
NOW = datetime(2026, 11, 23, 8, 15, 30, tzinfo=timezone.utc)


def stamp(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def cond(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": stamp(600)}


def orders(**status: Any) -> dict[str, Any]:
    """An EtcdCluster as the API returns it: a follower being replaced, the rest healthy."""
    body: dict[str, Any] = {
        "apiVersion": contract.API_VERSION, "kind": contract.KIND_ETCD,
        "metadata": {"name": "orders", "namespace": "shop", "generation": 4},
        "spec": {"replicas": 3, "version": "3.7.3", "backup": {"s3": {
            "endpoint": "https://s3.example.com", "bucket": "etcd-backups", "prefix": "prod",
            "credentialsSecret": "s3-credentials"}, "schedule": "@daily"}},
        "status": {
            "observedGeneration": 4, "replicas": 3, "readyReplicas": 2, "leader": "orders-4",
            "workloadKind": "AdvancedStatefulSet", "version": "3.7.3",
            "members": [
                {"name": "orders-0", "id": "8e9e05c52164694d", "role": "follower", "learner": False, "inRaft": True,
                 "healthy": True, "ready": True, "indexLag": 0, "lastHeartbeat": stamp(3)},
                {"name": "orders-1", "id": "91bc3c398fb3c146", "role": "learner", "learner": True, "inRaft": True,
                 "healthy": True, "ready": False, "indexLag": 1840, "lastHeartbeat": stamp(75)},
                {"name": "orders-4", "id": "fd422379fda50e48", "role": "leader", "learner": False, "inRaft": True,
                 "healthy": True, "ready": True, "indexLag": 0, "lastHeartbeat": stamp(4000)},
            ],
            "conditions": [
                cond("Available", "True", "QuorumHealthy", "2 of 3 members healthy, 2 serving linearizable reads"),
                cond("Progressing", "True", "Replacing", "replacing orders-1: Learner (catching up)"),
                cond("Degraded", "False", "AsExpected", "no problem found"),
                cond("QuorumLost", "False", "QuorumHealthy", "leader orders-4"),
            ],
            "replacements": [{"pod": "orders-1", "phase": "Learner", "message": "catching up"}],
            "disagreements": [],
            **status,
        },
    }
    return body


NODES = {"orders-0": "node-a", "orders-1": "node-b", "orders-4": "node-c"}


def test_status_text_matches_the_golden_file() -> None:
    rendered = text.status(views.status_view(orders(), NODES, NOW))
    if os.environ.get("RAFTSET_UPDATE_GOLDEN"):
        GOLDEN.write_text(rendered)
    assert rendered == GOLDEN.read_text()


def test_status_view_names_each_members_ordinal_node_and_heartbeat_age() -> None:
    view = views.status_view(orders(), NODES, NOW)
    assert [(m["name"], m["ordinal"], m["node"], m["heartbeatAge"]) for m in view["members"]] == [
        ("orders-0", 0, "node-a", "3s"), ("orders-1", 1, "node-b", "1m"), ("orders-4", 4, "node-c", "1h")]
    assert view["serving"] and view["leader"] == "orders-4" and view["desired"] == 3
    json.dumps(view)  # -o json prints it as it is


def test_status_view_reads_each_heartbeat_age_from_its_lease_over_the_status_refresh() -> None:
    """The status writes renewal times alone only every RAFTSET_STATUS_REFRESH_SECONDS: the Lease is live."""
    leases = [heartbeat_lease("orders-1", "a1", "follower", 10, 5, 10, seconds_ago=4),
              heartbeat_lease("other-4", "b4", "leader", 10, 5, 10, seconds_ago=1)]  # another cluster's pod
    view = views.status_view(orders(), NODES, NOW, leases)
    assert [m["heartbeatAge"] for m in view["members"]] == ["3s", "4s", "1h"]
    assert view["members"][1]["lastHeartbeat"] == stamp(4)


def test_status_view_of_a_cluster_the_operator_has_not_seen_yet() -> None:
    body = orders()
    body["status"] = {}
    del body["spec"]["replicas"]
    view = views.status_view(body, {}, NOW)
    assert view["members"] == [] and not view["serving"] and view["activity"] == ["nothing"]
    assert "members - ready of - desired, leader none\n\nno member published yet" in text.status(view)


def test_a_second_raft_entry_for_one_pod_keeps_its_ordinal_and_node() -> None:
    body = orders(members=[{"name": "orders-0/abc", "id": "abc", "role": "unknown"}])
    (member,) = views.status_view(body, NODES, NOW)["members"]
    assert (member["ordinal"], member["node"], member["heartbeatAge"]) == (0, "node-a", "")


@pytest.mark.parametrize(("available", "degraded", "serving"), [
    ("True", "False", True), ("True", "True", False), ("False", "False", False), ("Unknown", "False", False)])
def test_serving_is_available_and_not_degraded(available: str, degraded: str, serving: bool) -> None:
    body = orders(conditions=[cond("Available", available, "x", ""), cond("Degraded", degraded, "y", "")])
    assert views.serving(body) is serving


def test_activity_says_what_the_operator_does_and_why() -> None:
    body = orders(observedGeneration=3, disagreements=["orders-2 runs no Raft member"],
                  conditions=[cond("Progressing", "True", "ScalingIn", "removing orders-3"),
                              cond("QuorumLost", "True", "QuorumLost", "1 of 3 voting members answer")])
    assert views.activity(body) == [
        "the operator has not acted on the latest spec yet (generation 4, observed 3)",
        "ScalingIn: removing orders-3",
        "QuorumLost=True (QuorumLost): 1 of 3 voting members answer",
        "replacing orders-1: Learner (catching up)",
        "orders-2 runs no Raft member"]
    idle = orders(replacements=[], conditions=[cond("Progressing", "False", "Settled", "3 members as desired")])
    assert views.activity(idle) == ["nothing: 3 members as desired"]


def test_diagnosis_puts_what_stops_service_first_and_work_in_progress_last() -> None:
    body = orders(conditions=[
        cond("Progressing", "True", "Replacing", "replacing orders-1"),
        cond("Encrypted", "False", "TLSDisabled", "plain text"),
        cond("Available", "True", "QuorumHealthy", "fine"),
        cond("Degraded", "True", "ReplaceNeeded", "orders-1 crash-loops"),
        cond("BackupReady", "False", "CredentialsRejected", "403"),
    ])
    assert views.diagnosis(body) == [
        "Degraded is True (ReplaceNeeded): orders-1 crash-loops",
        "Encrypted is False (TLSDisabled): plain text",
        "BackupReady is False (CredentialsRejected): 403",
        "busy (Replacing): replacing orders-1"]
    assert views.diagnosis(orders(conditions=[])) == ["the operator has published no conditions yet: is it running?"]


def event(name: str, seconds_ago: float, reason: str, kind: str = "EtcdCluster", count: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name}, "type": "Normal", "reason": reason, "message": f"{reason} happened",
            "count": count, "lastTimestamp": stamp(seconds_ago), "involvedObject": {"kind": kind, "name": "orders"}}


def test_events_newest_first_within_the_limit() -> None:
    rows = views.event_rows([event("a", 300, "Old"), event("b", 5, "New", count=3), event("c", 60, "Mid", "Pod"),
                             {"reason": "Timeless", "involvedObject": {}}], NOW, limit=3)
    assert [(r["reason"], r["age"], r["object"], r["count"]) for r in rows] == [
        ("New", "5s", "EtcdCluster/orders", 3), ("Mid", "1m", "Pod/orders", 1), ("Old", "5m", "EtcdCluster/orders", 1)]


def test_why_says_nothing_is_wrong_or_each_problem_in_words() -> None:
    calm = orders(replacements=[], conditions=[cond("Available", "True", "QuorumHealthy", "3 of 3"),
                                               cond("Degraded", "False", "AsExpected", "no problem found")])
    view = views.why_view(calm, [event("a", 10, "ScalingOut")], NOW)
    assert view["diagnosis"] == ["nothing is wrong"] and view["serving"]
    rendered = text.why(view)
    assert "serving" in rendered and "  10s ago  Normal   ScalingOut (EtcdCluster/orders): ScalingOut happened" in rendered
    broken = views.why_view(orders(conditions=[cond("Available", "False", "NoLeader", "no member leads")]), [], NOW)
    assert broken["diagnosis"] == ["Available is False (NoLeader): no member leads"] and not broken["serving"]
    assert "NOT serving" in text.why(broken) and "  none" in text.why(broken)


def heartbeat_lease(pod: str, member: str, role: str, committed: int, term: int, applied: int,
                    seconds_ago: float = 2) -> dict[str, Any]:
    beat = {"member_id": member, "role": role, "healthy": role in ("leader", "follower"), "raft_term": term,
            "raft_index": committed, "raft_applied_index": applied, "ready": False}
    return {"metadata": {"name": contract.lease_name(pod), "labels": {contract.LABEL_HEARTBEAT: "true"},
                         "annotations": {contract.ANNOTATION_HEARTBEAT: json.dumps(beat)}},
            "spec": {"holderIdentity": pod, "renewTime": stamp(seconds_ago).replace("Z", ".000000Z"),
                     "leaseDurationSeconds": 30}}


def membership_lease(cluster: str, *members: tuple[str, str, bool]) -> dict[str, Any]:
    doc = {"leader_id": "", "leader": "", "term": 5, "index": 100,
           "members": [{"id": i, "name": n, "ordinal": contract.ordinal_of(n), "peer_urls": [], "learner": learner,
                        "started": True} for i, n, learner in members]}
    return {"metadata": {"name": contract.membership_lease_name(cluster),
                         "annotations": {contract.ANNOTATION_MEMBERSHIP: json.dumps(doc)}}}


def test_survivors_are_ranked_by_the_operators_rule_and_auto_is_its_choice() -> None:
    """Highest committed index first, then term, applied index, lowest ordinal (raftset.quorum_loss);
    learners, stores that do not answer Status, other clusters' pods and non-voters are no survivors."""
    lost = orders(conditions=[cond("QuorumLost", "True", "QuorumLost", "2 of 5 voting members answer, 3 needed")])
    leases = [
        heartbeat_lease("orders-0", "a0", "unknown", 100, 5, 100),
        heartbeat_lease("orders-1", "a1", "unknown", 120, 5, 90),
        heartbeat_lease("orders-2", "a2", "unknown", 120, 6, 80),
        heartbeat_lease("orders-3", "a3", "unknown", 0, 0, 0),  # its store does not answer
        heartbeat_lease("orders-4", "a4", "learner", 500, 9, 500),
        heartbeat_lease("orders-5", "a5", "unknown", 900, 9, 900),  # not a voter in the published membership
        heartbeat_lease("other-0", "b0", "unknown", 999, 9, 999),
        membership_lease("orders", ("a0", "orders-0", False), ("a1", "orders-1", False), ("a2", "orders-2", False),
                         ("a3", "orders-3", False), ("a4", "orders-4", True)),
    ]
    view = views.survivors_view(lost, leases, NOW)
    assert [s["pod"] for s in view["survivors"]] == ["orders-2", "orders-1", "orders-0"]
    assert view["auto"] == "orders-2" and view["quorumLost"]["reason"] == "QuorumLost"
    rendered = text.survivors(view)
    assert "QuorumLost=True (QuorumLost)" in rendered and "`auto` would choose orders-2." in rendered
    assert rendered.index("orders-2") < rendered.index("orders-1 ") < rendered.index("orders-0 ")


def test_no_survivor_is_said_plainly() -> None:
    view = views.survivors_view(orders(conditions=[]), [], NOW)
    assert view["survivors"] == [] and view["auto"] == ""
    assert "none answers Status" in text.survivors(view) and "not reported" in text.survivors(view)


def test_replace_steps_not_shown_yet_the_current_one_with_the_sidecars_words() -> None:
    steps = ("Removing", "Rejoining", "Learner")
    assert views.replace_steps(steps, "Learner", "catching up", 0) == ["Removing", "Rejoining", "Learner: catching up"]
    assert views.replace_steps(steps, "Learner", "catching up", 2) == ["Learner: catching up"]
    assert views.replace_steps(steps, "Learner", "", 3) == []


def lost(status: str, reason: str) -> dict[str, str]:
    return {"type": "QuorumLost", "status": status, "reason": reason, "message": f"{reason} message"}


@pytest.mark.parametrize(("now", "recovering_seen", "pending", "refusals", "outcome"), [
    # Refused: the request gone and a RecoveryRefused posted since it.
    (lost("False", "QuorumHealthy"), False, False, ["recover-quorum=auto refused: the cluster has quorum"],
     (False, "refused: recover-quorum=auto refused: the cluster has quorum")),
    (lost("False", "QuorumHealthy"), False, True, ["old words"], None),  # not taken yet
    (lost("True", "QuorumLost"), False, False, [], None),  # taken, nothing said yet
    (lost("True", "Recovering"), True, False, [], None),
    (lost("False", "Rejoining"), True, False, [], None),  # writable, members still joining
    (lost("False", "Recovered"), True, False, [], (True, "recovered: Recovered message")),
    (lost("False", "QuorumHealthy"), True, False, [], (True, "recovered: QuorumHealthy message")),
    # Recovered without the plugin seeing it under way (too quick between two reads): not claimed.
    (lost("False", "Recovered"), False, False, [], None),
])
def test_a_recovery_request_is_answered_by_a_refusal_or_a_recovery(
        now: dict[str, str], recovering_seen: bool, pending: bool, refusals: list[str],
        outcome: tuple[bool, str] | None) -> None:
    assert views.recovery_outcome(now, recovering_seen, pending, refusals) == outcome


SUCCESS = {"key": "prod/shop/orders/snapshot-20261123T081502Z-r48213.db", "revision": 48213, "size": 10,
           "sha256": "9f0c", "time": "2026-11-23T08:15:02Z"}
FAILURE = {"time": "2026-11-23T09:00:00Z", "reason": "CredentialsRejected", "message": "403"}


@pytest.mark.parametrize(("before", "after", "outcome"), [
    ({}, {}, None),
    ({}, {"lastSuccess": SUCCESS}, ("succeeded", SUCCESS)),
    ({"lastSuccess": SUCCESS}, {"lastSuccess": SUCCESS}, None),
    ({"lastSuccess": SUCCESS}, {"lastSuccess": SUCCESS, "lastFailure": FAILURE, "failures": 1}, ("failed", FAILURE)),
    # The same failure again: only the count tells.
    ({"lastFailure": FAILURE, "failures": 1}, {"lastFailure": FAILURE, "failures": 2}, ("failed", FAILURE)),
    ({"lastFailure": FAILURE, "failures": 1}, {"lastFailure": FAILURE, "failures": 1}, None),
])
def test_backup_outcome_is_an_attempt_newer_than_the_request(
        before: dict[str, Any], after: dict[str, Any], outcome: tuple[str, dict[str, Any]] | None) -> None:
    assert views.backup_outcome(before, after) == outcome


def manifest(stamp_: str, revision: int) -> backups.Manifest:
    return backups.Manifest(key=f"prod/shop/orders/snapshot-{stamp_}-r{revision}.db", sha256="ab", size=7,
                            revision=revision, taken=stamp_, engine="etcd", cluster="orders", namespace="shop")


def test_backups_newest_first_with_latest_marked() -> None:
    old, new = manifest("20261122T000000Z", 10), manifest("20261123T000000Z", 20)
    view = views.backups_view(orders(), orders()["spec"]["backup"]["s3"], [old, new], old)
    assert [(b["revision"], b["latest"]) for b in view["backups"]] == [(20, False), (10, True)]
    assert view["prefix"] == "prod/shop/orders/" and view["latest"] == old.key and view["bucket"] == "etcd-backups"
    rendered = text.backup_list(view)
    assert "*        prod/shop/orders/snapshot-20261122T000000Z-r10.db" in rendered
    assert "no backup published" in text.backup_list(views.backups_view(orders(), {}, [], None))


def test_the_restored_cluster_keeps_the_spec_and_reads_the_sources_bucket() -> None:
    source = orders()
    source["spec"]["bootstrap"] = {"fromBackup": {"backup": "latest", "cluster": "older"}}
    body = views.restored_cluster(source, "latest", "orders-restored", 1)
    assert body["metadata"] == {"name": "orders-restored", "namespace": "shop"}
    assert body["kind"] == contract.KIND_ETCD and body["spec"]["replicas"] == 1
    assert body["spec"]["bootstrap"] == {"fromBackup": {"backup": "latest", "cluster": "orders",
                                                        "s3": source["spec"]["backup"]["s3"]}}
    assert body["spec"]["version"] == "3.7.3" and body["spec"]["backup"] == source["spec"]["backup"]
    assert source["spec"]["bootstrap"]["fromBackup"]["cluster"] == "older", "the source is not changed"
    assert views.restored_cluster(source, "latest", "x", None)["spec"]["replicas"] == 3


@pytest.mark.parametrize(("seconds", "shown"), [(0, "0s"), (59, "59s"), (60, "1m"), (3599, "59m"), (7200, "2h"),
                                                (90000, "1d"), (-5, "0s")])
def test_ages_read_like_kubectls(seconds: int, shown: str) -> None:
    assert views.age(NOW - timedelta(seconds=seconds), NOW) == shown
    assert views.age(None, NOW) == ""


@pytest.mark.parametrize("typed", ["EtcdCluster", "etcdclusters", "etcdcluster", "etcdc", "etcd", "ETCDC"])
def test_kind_as_a_user_types_it(typed: str) -> None:
    assert engine_of(typed).kind == contract.KIND_ETCD


def test_xline_and_unknown_kinds() -> None:
    assert engine_of("xc").kind == engine_of("XlineCluster").kind == contract.KIND_XLINE
    with pytest.raises(UsageError):
        engine_of("zookeeper")


def test_kubectls_options_go_before_or_after_the_verb() -> None:
    before = cli.parser().parse_args(["-n", "shop", "-o", "json", "status", "orders"])
    after = cli.parser().parse_args(["status", "orders", "-n", "shop", "-o", "json", "--kind", "xc"])
    assert (before.namespace, before.output, before.kind) == ("shop", "json", None)
    assert (after.namespace, after.output, after.kind) == ("shop", "json", "xc")
    assert cli.parser().parse_args(["status", "orders"]).output == "text"


@pytest.mark.parametrize("argv", [[], ["status"], ["restore", "orders", "--as", "new"], ["frobnicate", "x"],
                                  ["status", "orders", "-o", "yaml"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2


@pytest.mark.parametrize("verb", ["status", "why", "replace", "recover-quorum", "backup", "backups", "restore"])
def test_every_verb_has_help_with_an_example_and_the_exit_codes(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main([verb, "--help"])
    shown = capsys.readouterr().out
    assert exited.value.code == 0
    assert f"example:\n  kubectl raftset {verb} " in shown and "exit codes:" in shown
    assert "-o {text,json}" in shown
