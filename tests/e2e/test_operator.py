"""The operator on the real control plane: both kinds x both backends.

Pods are kwok pods; `Sidecars` does what their sidecars would do and writes what they would
write, with the leader placed where a test wants it.
"""

from __future__ import annotations

import itertools
import re
import urllib.request
from typing import Any

import pytest
import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from raftset import contract, engines
from raftset.operator.pure.planner import NO_HAND_OFF_REASON
from tests.harness.operator import Operator, Sidecars, kubectl, wait_for
from tests.harness.view import STEP_TIMEOUT, ClusterView, cluster_manifest

pytestmark = pytest.mark.e2e

KINDS = {"EtcdCluster": "etcdclusters", "XlineCluster": "xlineclusters"}
BACKENDS = ("StatefulSet", "AdvancedStatefulSet")


@pytest.mark.parametrize("kind,backend", list(itertools.product(KINDS, BACKENDS)))
def test_scale_out_and_in_with_leader_on_highest_ordinal(
        control_plane: Any, operator: Operator, namespace: str, kind: str, backend: str) -> None:
    c = ClusterView(control_plane.kubeconfig, kind, "kv", namespace, backend)
    c.create(3)
    with Sidecars(c.api, namespace, c.name, leader=2) as sidecars:
        c.wait_pods(0, 1, 2)
        obj = c.wait_settled(3)
        assert obj["status"]["leader"] == "kv-2"
        assert obj["status"]["workloadKind"] == backend
        assert {m["name"] for m in obj["status"]["members"]} == c.pod_names(0, 1, 2)
        assert all(m["healthy"] and m["id"] for m in obj["status"]["members"])
        assert c.workload()["kind"] == "StatefulSet"
        assert c.workload()["apiVersion"].startswith("apps.kruise.io" if backend != "StatefulSet" else "apps/")

        c.scale(5)  # through the scale subresource, as `kubectl scale` does
        c.wait_pods(0, 1, 2, 3, 4)
        c.wait_settled(5)

        sidecars.leader = 4  # the ordinal the builtin StatefulSet deletes first
        wait_for(lambda: c.obj()["status"].get("leader") == "kv-4", 30, "leader kv-4 in status")
        c.scale(3)
        if backend == "AdvancedStatefulSet":
            c.wait_pods(0, 1, 4)
            obj = c.wait_settled(3)
            assert obj["status"]["leader"] == "kv-4", "the leader pod must be kept"
            assert sorted(c.workload()["spec"]["reserveOrdinals"]) == [2, 3]
            assert obj["status"]["reservedOrdinals"] == [2, 3]
            assert sidecars.leaders_seen[-1] == 4
        else:
            c.wait_pods(0, 1, 2)
            obj = c.wait_settled(3)
            assert obj["status"]["leader"] != "kv-4"
            # Its sidecar hands off first where the engine can; elsewhere (Xline) the user is warned.
            said = "LeaderHandOff" if engines.BY_KIND[kind].capabilities.hand_off else NO_HAND_OFF_REASON
            assert any(reason == said and "kv-4" in message for reason, message in c.events())
        reasons = [reason for reason, _ in c.events()]
        assert reasons.count("ScalingIn") >= 2 and reasons.count("ScalingOut") >= 2

        # Re-fill: Advanced StatefulSet fills the holes first.
        c.scale(5)
        c.wait_pods(0, 1, 2, 3, 4)
        c.wait_settled(5)
        if backend == "AdvancedStatefulSet":
            assert not c.workload()["spec"].get("reserveOrdinals")


def test_operator_killed_mid_scale_resumes(control_plane: Any, operator: Operator, namespace: str) -> None:
    c = ClusterView(control_plane.kubeconfig, "EtcdCluster", "resume", namespace, "AdvancedStatefulSet")
    c.create(5)
    with Sidecars(c.api, namespace, c.name, leader=4):
        c.wait_pods(0, 1, 2, 3, 4)
        c.wait_settled(5)
        c.scale(3)
        wait_for(lambda: c.workload()["spec"]["replicas"] == 4, STEP_TIMEOUT, "the first scale-in step")
        operator.kill()
        assert c.workload()["spec"]["reserveOrdinals"] == [3]
        operator.start()
        c.wait_pods(0, 1, 4)
        obj = c.wait_settled(3)
        assert obj["status"]["leader"] == "resume-4"
        assert c.workload()["spec"]["reserveOrdinals"] == [2, 3]
        # reserveOrdinals [2, 3] at 3 replicas: exactly two steps. The first step's Event may
        # be lost with the operator (killed right after its write); none may come twice.
        scaled_in = [m for reason, m in c.events() if reason == "ScalingIn"]
        assert 1 <= len(scaled_in) <= 2 and len(set(scaled_in)) == len(scaled_in), \
            f"each member is removed once, got {scaled_in}"


def test_drift_is_repaired(control_plane: Any, operator: Operator, namespace: str) -> None:
    c = ClusterView(control_plane.kubeconfig, "EtcdCluster", "drift", namespace, "StatefulSet")
    c.create(3, sidecar={"heartbeatIntervalSeconds": 2})  # each scale-out step waits for a renewal to be seen
    with Sidecars(c.api, namespace, c.name):
        c.wait_pods(0, 1, 2)
        c.wait_settled(3)
        old_uid = c.core.read_namespaced_service("drift-client", namespace).metadata.uid
        c.core.delete_namespaced_service("drift-client", namespace)
        wait_for(lambda: c.core.read_namespaced_service("drift-client", namespace).metadata.uid != old_uid,
                 30, "the client Service to come back")
        c.core.patch_namespaced_service("drift-peer", namespace, {"spec": {"publishNotReadyAddresses": False}})
        wait_for(lambda: c.core.read_namespaced_service("drift-peer", namespace).spec.publish_not_ready_addresses,
                 30, "the peer Service to publish not-ready addresses again")
        apps = client.AppsV1Api(c.api)
        apps.patch_namespaced_stateful_set("drift", namespace, {"spec": {"replicas": 1}})
        # Where the deleted pods' sidecars removed their members (they read kept=[0]), the operator
        # restores the size the way it scales out: one member at a time, each confirmed by Raft.
        wait_for(lambda: apps.read_namespaced_stateful_set("drift", namespace).spec.replicas == 3,
                 STEP_TIMEOUT, "the StatefulSet's replicas to be restored")
        c.wait_pods(0, 1, 2)
        # The sidecars of the pods the drift deleted read kept=[0] in preStop and may have removed their
        # members: their pods, back, join again, and the cluster settles at three voters.
        c.wait_settled(3)


BAD_SPECS: list[tuple[str, dict[str, Any], str]] = [
    ("negative replicas", {"replicas": -1}, "spec.replicas"),
    ("replicas not an integer", {"replicas": "three"}, "spec.replicas"),
    ("unknown workload kind", {"workloadKind": "Deployment"}, "spec.workloadKind"),
    ("unknown TLS provider", {"tls": {"provider": "letsencrypt"}}, "spec.tls.provider"),
    ("bad storage size", {"storage": {"size": "lots"}}, "spec.storage.size"),
    ("ephemeral with a storage class", {"storage": {"ephemeral": True, "storageClassName": "fast"}},
     "storage"),
    ("operator-owned option", {"options": {"data-dir": "/tmp"}}, "data-dir"),
    ("issuerRef without cert-manager", {"tls": {"provider": "auto", "issuerRef": {"name": "ca"}}}, "issuerRef"),
    ("heartbeat interval zero", {"sidecar": {"heartbeatIntervalSeconds": 0}}, "heartbeatIntervalSeconds"),
    ("unknown field", {"replica": 3}, "replica"),
    ("too many replicas", {"replicas": 100}, "spec.replicas"),
    ("podTemplate labels not a map", {"podTemplate": {"labels": ["a"]}}, "spec.podTemplate.labels"),
    ("uploads aborted under an hour old", {"backup": {"retention": {"abortIncompleteUploadsAfter": "59m"},
                                                      "pvc": {"claimName": "backups"}}}, "at least 1h"),
]


@pytest.mark.parametrize("what,spec,needle", BAD_SPECS, ids=[b[0] for b in BAD_SPECS])
@pytest.mark.parametrize("kind", KINDS)
def test_bad_cluster_is_refused_by_the_apiserver(
        control_plane: Any, operator: Operator, namespace: str, kind: str, what: str,
        spec: dict[str, Any], needle: str) -> None:
    body = cluster_manifest(kind, "bad", namespace, 3, None)
    body["spec"].update(spec)
    result = kubectl(control_plane.kubeconfig, "create", "--validate=strict", "-f", "-",
                     stdin=yaml.safe_dump(body), check=False)
    assert result.returncode != 0, f"{what} was accepted"
    assert needle in result.stderr, result.stderr


def test_owned_option_message_names_the_flag(control_plane: Any, operator: Operator, namespace: str) -> None:
    body = cluster_manifest("XlineCluster", "bad", namespace, 3, None, options={"members": "x=y"})
    result = kubectl(control_plane.kubeconfig, "create", "-f", "-", stdin=yaml.safe_dump(body), check=False)
    assert result.returncode != 0 and "members" in result.stderr, result.stderr


def test_workload_kind_is_immutable(control_plane: Any, operator: Operator, namespace: str) -> None:
    c = ClusterView(control_plane.kubeconfig, "EtcdCluster", "immutable", namespace, "StatefulSet")
    c.create(1)
    result = kubectl(control_plane.kubeconfig, "patch", "etcdclusters/immutable", "-n", namespace, "--type=merge",
                     "-p", '{"spec":{"workloadKind":"AdvancedStatefulSet"}}', check=False)
    assert result.returncode != 0 and "immutable" in result.stderr.lower(), result.stderr


def test_deleting_a_cluster_removes_what_it_owns(control_plane: Any, operator: Operator, namespace: str) -> None:
    c = ClusterView(control_plane.kubeconfig, "XlineCluster", "gone", namespace, "AdvancedStatefulSet")
    c.create(3)
    with Sidecars(c.api, namespace, c.name):
        c.wait_pods(0, 1, 2)
        c.wait_settled(3)
    kubectl(control_plane.kubeconfig, "delete", "xlineclusters/gone", "-n", namespace, "--wait=true",
            "--timeout=60s")
    core, policy = c.core, client.PolicyV1Api(c.api)

    def all_gone() -> bool:
        selector = f"{contract.LABEL_INSTANCE}=gone"
        return (not core.list_namespaced_service(namespace, label_selector=selector).items
                and not policy.list_namespaced_pod_disruption_budget(namespace, label_selector=selector).items
                and not core.list_namespaced_pod(namespace, label_selector=selector).items
                and not client.CoordinationV1Api(c.api).list_namespaced_lease(
                    namespace, label_selector=selector).items)
    wait_for(all_gone, 90, "owned objects garbage-collected")


def test_the_operator_metrics_show_the_leader_and_the_members(
        control_plane: Any, operator: Operator, namespace: str) -> None:
    """Scraped over HTTP as Prometheus would: the per-cluster gauges follow status, and the
    reconcile and scale-step counters move."""
    c = ClusterView(control_plane.kubeconfig, "EtcdCluster", "scraped", namespace, "StatefulSet")
    c.create(3)
    with Sidecars(c.api, namespace, c.name, leader=1):
        c.wait_pods(0, 1, 2)
        c.wait_settled(3)
        labels = {"namespace": namespace, "cluster": "scraped", "kind": "EtcdCluster"}

        def scraped() -> dict[str, float] | None:
            with urllib.request.urlopen(operator.metrics_url, timeout=5) as response:
                text = response.read().decode()
            out: dict[str, float] = {}
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if labels.items() <= sample.labels.items():
                        extra = {k: v for k, v in sample.labels.items() if k not in labels}
                        out[sample.name + "".join(f"/{v}" for _, v in sorted(extra.items()))] = sample.value
            settled = out.get("raftset_cluster_voters") == 3 and out.get("raftset_cluster_has_leader") == 1
            return out if settled else None

        got = wait_for(scraped, 30, "the operator's metrics to show 3 voters and a leader")
        assert got["raftset_cluster_members"] == 3 and got["raftset_cluster_healthy_voters"] == 3
        assert got["raftset_cluster_member_healthy/scraped-1/leader"] == 1
        assert got["raftset_cluster_condition/Available/QuorumHealthy"] == 1
        with urllib.request.urlopen(operator.metrics_url, timeout=5) as response:
            text = response.read().decode()
        assert re.search(r'^raftset_operator_scale_steps_total\{kind="EtcdCluster",step="create"\} [1-9]', text, re.M)
        assert re.search(r'^raftset_operator_reconciles_total\{kind="EtcdCluster",result="ok"\} [1-9]', text, re.M)
