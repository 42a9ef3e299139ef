"""The operator against a bare kube-apiserver: no workload controllers, no OpenKruise.

What must hold without controllers: the owned objects are applied with owner references
and labels, status and printer columns come from the heartbeat Leases, and a cluster
asking for Advanced StatefulSet where OpenKruise is absent is Degraded, not crashed.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timezone
from typing import Any

import pytest
from kubernetes import client

from raftset import contract
from raftset.sidecar.pure.heartbeat import Heartbeat, lease_body, rfc3339
from raftset.workloads import POD_NAME_LABEL
from tests.harness.objects import apply_lease, condition, create
from tests.harness.operator import Operator, api, heartbeat_lease, kubectl, member_id, membership_lease, wait_for

pytestmark = pytest.mark.k8s

def test_owned_objects_are_applied_with_owner_and_labels(kube_apiserver: Any, bare_operator: Operator,
                                                          namespace: str) -> None:
    create(kube_apiserver.kubeconfig, "EtcdCluster", "plain", namespace, workloadKind="StatefulSet")
    apps = client.AppsV1Api(api(kube_apiserver.kubeconfig))
    sts = wait_for(lambda: apps.read_namespaced_stateful_set("plain", namespace), 30, "the StatefulSet")
    assert sts.spec.replicas == 3
    assert sts.metadata.owner_references[0].kind == "EtcdCluster"
    assert sts.metadata.labels[contract.LABEL_MANAGED_BY] == "raftset"
    init = sts.spec.template.spec.init_containers[0]
    assert init.name == "sidecar" and init.restart_policy == "Always"
    core = client.CoreV1Api(api(kube_apiserver.kubeconfig))
    peer = core.read_namespaced_service("plain-peer", namespace)
    assert peer.spec.cluster_ip == "None" and peer.spec.publish_not_ready_addresses
    pdb = client.PolicyV1Api(api(kube_apiserver.kubeconfig)).read_namespaced_pod_disruption_budget("plain", namespace)
    assert pdb.spec.min_available == 2


def test_status_and_printer_columns_follow_the_heartbeats(kube_apiserver: Any, bare_operator: Operator,
                                                          namespace: str) -> None:
    create(kube_apiserver.kubeconfig, "XlineCluster", "beats", namespace, workloadKind="StatefulSet")
    leases = client.CoordinationV1Api(api(kube_apiserver.kubeconfig))
    for ordinal in range(3):
        pod = contract.pod_name("beats", ordinal)
        beat = Heartbeat(member_id=f"{ordinal + 10:x}", name=pod, healthy=True,
                         role=contract.ROLE_LEADER if ordinal == 1 else contract.ROLE_FOLLOWER,
                         raft_term=3, raft_index=7, raft_applied_index=7, time=rfc3339(datetime.now(timezone.utc)), cluster_id="c",
                         ready=True, ready_reason="")
        leases.create_namespaced_lease(namespace, lease_body(pod, namespace, "beats", beat, duration=600, owner=None))
    custom = client.CustomObjectsApi(api(kube_apiserver.kubeconfig))

    def with_members() -> dict[str, Any] | None:
        obj = custom.get_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "xlineclusters", "beats")
        return obj if len((obj.get("status") or {}).get("members", [])) == 3 else None

    obj = wait_for(with_members, 30, "three members in status")
    assert obj["status"]["leader"] == "beats-1"
    assert condition(obj, "Available")["status"] == "True"
    assert {m["id"] for m in obj["status"]["members"]} == {"a", "b", "c"}
    table = kubectl(kube_apiserver.kubeconfig, "get", "xc", "beats", "-n", namespace).stdout
    header, row = table.splitlines()[:2]
    assert "LEADER" in header and "WORKLOAD" in header
    assert "beats-1" in row and "StatefulSet" in row


def test_advanced_statefulset_without_openkruise_is_degraded(kube_apiserver: Any, bare_operator: Operator,
                                                            namespace: str) -> None:
    create(kube_apiserver.kubeconfig, "EtcdCluster", "nokruise", namespace, workloadKind="AdvancedStatefulSet")
    custom = client.CustomObjectsApi(api(kube_apiserver.kubeconfig))

    def degraded() -> dict[str, Any] | None:
        obj = custom.get_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters", "nokruise")
        return obj if condition(obj, "Degraded").get("status") == "True" else None

    obj = wait_for(degraded, 30, "Degraded condition")
    cond = condition(obj, "Degraded")
    assert cond["reason"] == "WorkloadAPIMissing" and "OpenKruise" in cond["message"]
    core = client.CoreV1Api(api(kube_apiserver.kubeconfig))
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=nokruise").items
    assert any(e.reason == "WorkloadAPIMissing" and e.type == "Warning" for e in events)
    assert bare_operator.alive(), "a bad cluster must not crash the operator"


def test_a_skipped_minor_or_a_downgrade_is_refused(kube_apiserver: Any, bare_operator: Operator,
                                                   namespace: str) -> None:
    kubeconfig = kube_apiserver.kubeconfig
    create(kubeconfig, "EtcdCluster", "versions", namespace, workloadKind="StatefulSet", version="3.5.35")
    custom = client.CustomObjectsApi(api(kubeconfig))

    def obj() -> dict[str, Any]:
        return custom.get_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters",
                                                   "versions")

    wait_for(lambda: (obj().get("status") or {}).get("version") == "3.5.35", 30, "status.version recorded")

    def patch(version: str) -> subprocess.CompletedProcess[str]:
        return kubectl(kubeconfig, "patch", "etcdclusters/versions", "-n", namespace, "--type=merge",
                       "-p", json.dumps({"spec": {"version": version}}), check=False)

    # The CRD refuses what it can see on its own: a skip, a downgrade.
    for refused in ("3.7.3", "3.4.23"):
        result = patch(refused)
        assert result.returncode != 0 and "one minor release forward at a time" in result.stderr, result.stderr
    # 3.5 -> 3.6 is fine, and 3.6 -> 3.7 looks fine to the CRD; but the members still run 3.5
    # (no controller rolls them here), so the operator refuses the second change.
    apps = client.AppsV1Api(api(kubeconfig))

    def store_image() -> str:
        template = apps.read_namespaced_stateful_set("versions", namespace).spec.template
        return next(c.image for c in template.spec.containers if c.name == "etcd")

    assert patch("3.6.16").returncode == 0
    wait_for(lambda: store_image().endswith(":v3.6.16"), 30, "the 3.6 template applied")
    assert patch("3.7.3").returncode == 0
    refused = wait_for(lambda: (o := obj()) and condition(o, "Degraded").get("reason") == "VersionChangeRefused"
                       and o, 30, "Degraded=VersionChangeRefused")
    assert "skips a minor" in condition(refused, "Degraded")["message"]
    assert refused["status"]["version"] == "3.5.35"
    assert store_image().endswith(":v3.6.16"), "the refused change touched nothing"


class FourVoters:
    """A 4-member cluster on a bare apiserver, leader 3, with its pods Running and Ready as a kubelet
    reports them (and labelled as the StatefulSet controller labels them) and heartbeats confirmed,
    fresh for 600 s: the scale-in tests' starting point. There are no controllers here."""

    def __init__(self, kubeconfig: str, operator: Operator, namespace: str, name: str) -> None:
        self.namespace, self.name = namespace, name
        create(kubeconfig, "EtcdCluster", name, namespace, workloadKind="StatefulSet", replicas=4,
               storage={"ephemeral": True})
        self.core = client.CoreV1Api(api(kubeconfig))
        self.apps = client.AppsV1Api(api(kubeconfig))
        self.custom = client.CustomObjectsApi(api(kubeconfig))
        self.leases = client.CoordinationV1Api(api(kubeconfig))
        wait_for(lambda: self.replicas() == 4, 30, "the StatefulSet")
        self.core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})
        for ordinal in range(4):
            self.run_pod(ordinal)
        self.beat_all()
        operator.rounds_pass(namespace, name)
        self.beat_all()  # renewed once the operator saw them: confirmed
        wait_for(lambda: condition(self.cluster(), "Available").get("status") == "True", 30, "Available with 4 members")

    def run_pod(self, ordinal: int) -> None:
        pod = contract.pod_name(self.name, ordinal)
        labels = {**contract.selector_labels(self.name), POD_NAME_LABEL: pod}
        self.core.create_namespaced_pod(self.namespace, {"metadata": {"name": pod, "labels": labels},
                                                         "spec": {"containers": [{"name": "etcd", "image": "etcd"}]}})
        # Running and Ready, as a kubelet reports: the Eviction API lets a pod that is not Ready go whatever
        # the budget's generation (it counts as unhealthy already).
        self.core.patch_namespaced_pod_status(pod, self.namespace, {"status": {
            "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})

    def beat_all(self) -> None:
        for ordinal in range(4):
            body = heartbeat_lease(self.namespace, self.name, contract.pod_name(self.name, ordinal),
                                   member_id=member_id(ordinal),
                                   role=contract.ROLE_LEADER if ordinal == 3 else contract.ROLE_FOLLOWER,
                                   lease_seconds=600)
            apply_lease(self.leases, self.namespace, body)
        apply_lease(self.leases, self.namespace, membership_lease(
            self.namespace, self.name, 3, {o: False for o in range(4)}, index=100, lease_seconds=600))

    def cluster(self) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(contract.GROUP, contract.VERSION, self.namespace,
                                                        "etcdclusters", self.name)

    def replicas(self) -> int:
        return self.apps.read_namespaced_stateful_set(self.name, self.namespace).spec.replicas


def test_a_kept_members_terminating_pod_holds_a_scale_in_its_fresh_heartbeat_would_allow(
        kube_apiserver: Any, bare_operator: Operator, namespace: str) -> None:
    """A node drain evicts a kept member's pod in the second the planner would remove another: the
    evicted pod's heartbeat is still fresh (found on real nodes, issue 26). 4 voters, leader 3: a
    scale-in to 3 would leave 2 serving of 4. The planner believes the pod list read for the step."""
    kubeconfig = kube_apiserver.kubeconfig
    kv = FourVoters(kubeconfig, bare_operator, namespace, "drain")
    name, core = kv.name, kv.core

    evicted = contract.pod_name(name, 0)
    core.patch_namespaced_pod(evicted, namespace, {"metadata": {"finalizers": ["raftset.dev/test-hold"]}})
    core.delete_namespaced_pod(evicted, namespace)  # terminating, held by the finalizer
    kubectl(kubeconfig, "patch", f"etcdclusters/{name}", "-n", namespace, "--type=merge",
            "-p", json.dumps({"spec": {"replicas": 3}}))
    refused = wait_for(lambda: (c := condition(kv.cluster(), "Degraded")).get("reason") == "ScaleRefused" and c, 30,
                       "Degraded=ScaleRefused")
    assert f"{evicted} not serving" in refused["message"], refused["message"]
    bare_operator.rounds_pass(namespace, name)
    assert kv.replicas() == 4, "a member was removed"

    core.patch_namespaced_pod(evicted, namespace, {"metadata": {"finalizers": None}})
    wait_for(lambda: not core.list_namespaced_pod(namespace, field_selector=f"metadata.name={evicted}").items, 30,
             "the evicted pod gone")
    kv.run_pod(0)  # re-created and running again: the step goes
    wait_for(lambda: kv.replicas() == 3, 30, "the scale-in step")


@pytest.mark.parametrize("moment", ["the victim marked", "the budget changed"])
def test_an_eviction_racing_a_scale_in_step_is_refused_by_the_pdb_or_holds_the_step(
        kube_apiserver: Any, bare_operator: Operator, namespace: str, moment: str) -> None:
    """A drain's eviction of a kept member lands in the moment the operator takes a scale-in step
    (found on real nodes, issue 26): the PDB still counted the step's victim as available, so it let
    the eviction through after the step's pod list, and the two left 2 serving of 4 voters. The test
    is the disruption controller (there is none here): it computes the PDB's status once, with every
    pod healthy, and evicts a kept member as soon as the victim is marked."""
    kubeconfig = kube_apiserver.kubeconfig
    kv = FourVoters(kubeconfig, bare_operator, namespace, "race")
    name, core = kv.name, kv.core
    policy = client.PolicyV1Api(api(kubeconfig))
    pdb = policy.read_namespaced_pod_disruption_budget(name, namespace)
    assert pdb.spec.min_available == 3
    policy.patch_namespaced_pod_disruption_budget_status(name, namespace, {"status": {
        "observedGeneration": pdb.metadata.generation, "currentHealthy": 4, "desiredHealthy": 3,
        "expectedPods": 4, "disruptionsAllowed": 1}})  # what the disruption controller computes: 4 healthy

    victim, evicted = contract.pod_name(name, 3), contract.pod_name(name, 0)
    kubectl(kubeconfig, "patch", f"etcdclusters/{name}", "-n", namespace, "--type=merge",
            "-p", json.dumps({"spec": {"replicas": 3}}))

    def marked() -> bool:
        return contract.ANNOTATION_SCALE_AWAY in (core.read_namespaced_pod(victim, namespace).metadata.annotations or {})

    def budget_changed() -> bool:
        return bool(policy.read_namespaced_pod_disruption_budget(name, namespace).spec.selector.match_expressions)

    wait_for(marked if moment == "the victim marked" else budget_changed, 30, moment, interval=0.01)
    try:
        core.create_namespaced_pod_eviction(evicted, namespace, {"metadata": {"name": evicted,
                                                                              "namespace": namespace}})
        accepted = True
    except client.ApiException as error:
        assert error.status == 429, error
        accepted = False
    print(f"the eviction of {evicted} was {'accepted' if accepted else 'refused'}")
    assert moment != "the budget changed" or not accepted, "an eviction let through by the budget that left the victim out"
    if not accepted:
        # Refused: the operator had changed the PDB (a new generation its status has not observed).
        wait_for(lambda: kv.replicas() == 3, 30, "the step")
        pdb = policy.read_namespaced_pod_disruption_budget(name, namespace)
        excluded = [e.values for e in pdb.spec.selector.match_expressions or [] if e.operator == "NotIn"]
        assert excluded == [[victim]], pdb.spec.selector
        return

    def decided() -> dict[str, Any] | None:
        degraded = condition(kv.cluster(), "Degraded")
        if degraded.get("reason") == "ScaleRefused" or kv.replicas() == 3:
            return degraded
        return None

    refused = wait_for(decided, 30, "the step taken or refused")
    assert kv.replicas() == 4, \
        f"the step was taken with {evicted} evicted: 2 serving of 4 voters"
    assert f"{evicted} not serving" in refused["message"], refused["message"]
    # As the disruption controller once it sees the evicted pod deleted: the entry goes.
    policy.patch_namespaced_pod_disruption_budget_status(name, namespace, {"status": {"disruptedPods": None}})
    kv.run_pod(0)
    wait_for(lambda: kv.replicas() == 3, 30, "the scale-in step")
