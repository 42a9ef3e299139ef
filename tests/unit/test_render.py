"""Pure renderers for both engines x both backends: workload, pod template, Services, PDB, RBAC."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from raftset import contract
from raftset.operator.pure.scale_step import SCALE_IN, ScaleStep, parse_step
from raftset.operator.components.disruption_budget import disrupted_pods, leaving_pods, pod_disruption_budget
from raftset.operator.pure.planner import Plan
from raftset.operator.components.member_rbac import member_rbac
from raftset.operator.components.services import client_service, peer_service
from raftset.operator.components.workload import workload_manifest
from raftset.operator.pure.objects import cached, edited_behind_our_back
from raftset.operator.pure.pod_template import pod_template, pull_policy
from raftset.operator.pure import objects, space, status, storage
from raftset.operator.components import tls
from raftset.operator.pure.spec import Cluster
from tests.unit.builders import cluster, owned_objects


pytestmark = pytest.mark.unit

ENGINES = [pytest.param(contract.KIND_ETCD, id="etcd"), pytest.param(contract.KIND_XLINE, id="xline")]
BACKENDS = [pytest.param("StatefulSet", id="builtin"), pytest.param("AdvancedStatefulSet", id="advanced")]
BOTH = [pytest.param(k, b, id=f"{k}-{b}") for k in (contract.KIND_ETCD, contract.KIND_XLINE)
        for b in ("StatefulSet", "AdvancedStatefulSet")]

RECOMMENDED = {
    contract.LABEL_NAME: contract.MANAGER,
    contract.LABEL_INSTANCE: "demo",
    contract.LABEL_MANAGED_BY: contract.MANAGER,
    contract.LABEL_PART_OF: contract.MANAGER,
}


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def sidecar(template: dict[str, Any]) -> dict[str, Any]:
    (container,) = template["spec"]["initContainers"]
    return container


def store(template: dict[str, Any]) -> dict[str, Any]:
    (container,) = template["spec"]["containers"]
    return container


# --- the workload ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("kind", "backend", "api_version"), [
    (contract.KIND_ETCD, "StatefulSet", "apps/v1"),
    (contract.KIND_XLINE, "StatefulSet", "apps/v1"),
    (contract.KIND_ETCD, "AdvancedStatefulSet", "apps.kruise.io/v1beta1"),
    (contract.KIND_XLINE, "AdvancedStatefulSet", "apps.kruise.io/v1beta1"),
])
def test_workload_api(kind: str, backend: str, api_version: str) -> None:
    obj = workload_manifest(cluster(kind, backend), 3)
    assert (obj["apiVersion"], obj["kind"]) == (api_version, "StatefulSet")
    assert (obj["metadata"]["name"], obj["metadata"]["namespace"]) == ("demo", "db")


@pytest.mark.parametrize("kind", ENGINES)
def test_reserve_ordinals_only_on_advanced(kind: str) -> None:
    builtin = workload_manifest(cluster(kind, "StatefulSet"), 3, [1])
    advanced = workload_manifest(cluster(kind, "AdvancedStatefulSet"), 3, [4, 1, 1])
    assert builtin["spec"]["replicas"] == 3 and "reserveOrdinals" not in builtin["spec"]
    assert advanced["spec"]["replicas"] == 3 and advanced["spec"]["reserveOrdinals"] == [1, 4]
    assert workload_manifest(cluster(kind, "AdvancedStatefulSet"), 5)["spec"]["reserveOrdinals"] == []


@pytest.mark.parametrize(("kind", "backend"), BOTH)
def test_workload_spec(kind: str, backend: str) -> None:
    c = cluster(kind, backend)
    spec = workload_manifest(c, 3)["spec"]
    assert spec["serviceName"] == "demo-peer"
    assert spec["selector"] == {"matchLabels": contract.selector_labels("demo")}
    # the selector must select the pods the template makes
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["template"] == pod_template(c)


SPEC_VARIANTS = [
    {},
    {"tls": {"provider": "disabled"}},
    {"storage": {"ephemeral": True}},
    {"storage": {"storageClassName": "fast", "size": "5Gi"}},
    {"options": {"snapshot-count": "5"}, "version": "3.4.23"},
    {"podTemplate": {"labels": {"team": "db"}, "nodeSelector": {"disk": "ssd"},
                     "tolerations": [{"key": "k", "operator": "Exists"}]}},
]


@pytest.mark.parametrize("kind", ENGINES)
@pytest.mark.parametrize("variant", SPEC_VARIANTS, ids=range(len(SPEC_VARIANTS)))
def test_one_pod_template_serves_both_backends(kind: str, variant: dict[str, Any]) -> None:
    """Only the sidecar's note of which API to read differs; every other byte is shared."""
    builtin = workload_manifest(cluster(kind, "StatefulSet", **variant), 3)
    advanced = workload_manifest(cluster(kind, "AdvancedStatefulSet", **variant), 3, [1])
    assert env(sidecar(builtin["spec"]["template"]))["RAFTSET_WORKLOAD_KIND"] == "StatefulSet"
    assert env(sidecar(advanced["spec"]["template"]))["RAFTSET_WORKLOAD_KIND"] == "AdvancedStatefulSet"

    def neutral(obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        for var in sidecar(obj["spec"]["template"])["env"]:
            if var["name"] == "RAFTSET_WORKLOAD_KIND":
                var["value"] = "<backend>"
        obj["spec"].pop("replicas")
        obj["spec"].pop("reserveOrdinals", None)
        obj.pop("apiVersion")
        return obj

    assert neutral(builtin) == neutral(advanced)


# --- the pod ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("kind", "backend"), BOTH)
def test_native_sidecar(kind: str, backend: str) -> None:
    c = cluster(kind, backend)
    container = sidecar(pod_template(c))
    assert container["name"] == "sidecar"
    assert container["restartPolicy"] == "Always"
    assert container["image"] == c.sidecar.image
    assert container["ports"] == [{"name": "sidecar", "containerPort": contract.SIDECAR_PORT}]
    assert container["startupProbe"]["httpGet"] == {"path": "/startup", "port": contract.SIDECAR_PORT}
    # A long join (learner catching up) must not be cut short by the startup probe.
    probe = container["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 600
    # ...nor started late: kubelet starts the store up to one period after the startup file is written.
    assert probe["periodSeconds"] <= 1
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"


@pytest.mark.parametrize(("kind", "backend"), BOTH)
def test_store_container(kind: str, backend: str) -> None:
    c = cluster(kind, backend)
    container = store(pod_template(c))
    assert container["name"] == c.engine.name
    assert container["image"] == c.image == c.engine.image()
    assert container["command"] == c.engine.command()
    assert {p["containerPort"] for p in container["ports"]} == {contract.CLIENT_PORT, contract.PEER_PORT,
                                                                contract.METRICS_PORT}
    assert container["lifecycle"] == {"preStop": {"httpGet": {"path": "/leave", "port": contract.SIDECAR_PORT}}}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": contract.SIDECAR_PORT}
    assert "restartPolicy" not in container
    # A removed Xline member keeps running with its ports closed: this probe is what ends it.
    assert container["livenessProbe"]["tcpSocket"] == {"port": contract.CLIENT_PORT}
    # Its last log lines reach the pod status: the sidecar tells corrupt data from them.
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


@pytest.mark.parametrize(("kind", "backend"), BOTH)
def test_both_containers_say_how_their_image_is_pulled_as_kubernetes_would_default_it(kind: str, backend: str) -> None:
    """OpenKruise defaults an unset policy to Always: on the real nodes an Advanced StatefulSet's store
    container then pulled an image its node held (ImagePullBackOff), where the StatefulSet's started."""
    template = pod_template(cluster(kind, backend))
    assert store(template)["imagePullPolicy"] == sidecar(template)["imagePullPolicy"] == "IfNotPresent"


@pytest.mark.parametrize(("image", "policy"), [
    ("gcr.io/etcd-development/etcd:v3.7.3", "IfNotPresent"),
    ("ghcr.io/raftset/raftset:0.1.0", "IfNotPresent"),
    ("registry.local:5000/etcd:v3.6.16", "IfNotPresent"),
    ("etcd:latest", "Always"),
    ("etcd", "Always"),
    ("registry.local:5000/etcd", "Always"),  # the port is no tag
    ("registry.local:5000/etcd@sha256:" + "a" * 64, "IfNotPresent"),
    ("etcd:latest@sha256:" + "b" * 64, "Always"),  # Kubernetes reads the tag, digest or not
])
def test_the_pull_policy_is_kubernetes_own_default(image: str, policy: str) -> None:
    assert pull_policy(image) == policy


@pytest.mark.parametrize("kind", ENGINES)
def test_only_xline_gets_a_scratch_volume_its_sidecar_sees_too(kind: str) -> None:
    template = pod_template(cluster(kind, "StatefulSet"))
    spec = template["spec"]
    mounts = {c["name"]: {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
              for c in spec["containers"] + spec["initContainers"]}
    scratch = [v for v in spec["volumes"] if v["name"] == "scratch"]
    if kind == contract.KIND_ETCD:
        assert scratch == [] and all("scratch" not in m for m in mounts.values())
        assert contract.SidecarEnv.SCRATCH_DIR not in env(sidecar(template))
    else:
        # Xline writes its snapshot copies under a /tmp of its own source's choosing and removes none.
        assert scratch == [{"name": "scratch", "emptyDir": {}}]
        assert mounts["xline"]["scratch"] == "/tmp"
        assert mounts["sidecar"]["scratch"] == contract.SCRATCH_MOUNT
        assert env(sidecar(template))[contract.SidecarEnv.SCRATCH_DIR] == contract.SCRATCH_MOUNT


@pytest.mark.parametrize("kind", ENGINES)
def test_engine_specific_parts(kind: str) -> None:
    c = cluster(kind, "StatefulSet", options={"snapshot-count": "5", "log-level": ""})
    template = pod_template(c)
    if kind == contract.KIND_ETCD:
        assert store(template)["command"] == ["etcd", "--config-file", f"{contract.RUN_MOUNT}/etcd.conf.yaml"]
        assert store(template)["image"].startswith("gcr.io/etcd-development/etcd:v")
    else:
        assert store(template)["command"][:2] == ["sh", "-c"]
        assert f"{contract.RUN_MOUNT}/xline.args" in store(template)["command"][2]
        assert store(template)["image"].startswith("ghcr.io/xline-kv/xline:v")
    variables = env(sidecar(template))
    assert variables["RAFTSET_ENGINE"] == c.engine.name
    # The user's options, over the quota and auto-compaction the volume allows (raftset.operator.pure.space).
    assert json.loads(variables["RAFTSET_OPTIONS"]) == {**space.defaults(c.engine, c.storage.size),
                                                        "snapshot-count": "5", "log-level": ""}


@pytest.mark.parametrize(("tls", "scheme"), [("auto", "https"), ("cert-manager", "https"), ("disabled", "http")])
def test_sidecar_environment(tls: str, scheme: str) -> None:
    c = cluster(tls={"provider": tls}, sidecar={"heartbeatIntervalSeconds": 4, "cleanIntervalSeconds": 9,
                                                 "cleanGracePeriodSeconds": 120})
    variables = env(sidecar(pod_template(c)))
    assert variables["RAFTSET_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert variables["RAFTSET_NAMESPACE"] == "db" and variables["RAFTSET_CLUSTER"] == "demo"
    assert variables["RAFTSET_WORKLOAD_NAME"] == "demo"
    assert variables["RAFTSET_PEER_URL_TEMPLATE"] == f"{scheme}://{{pod}}.demo-peer.db.svc:2380"
    assert variables["RAFTSET_CLIENT_URL_TEMPLATE"] == f"{scheme}://{{pod}}.demo-peer.db.svc:2379"
    assert variables["RAFTSET_LISTEN_PEER_URL"] == f"{scheme}://0.0.0.0:2380"
    assert variables["RAFTSET_LISTEN_CLIENT_URL"] == f"{scheme}://0.0.0.0:2379"
    assert variables["RAFTSET_TLS_DIR"] == (contract.TLS_MOUNT if scheme == "https" else "")
    assert (variables["RAFTSET_HEARTBEAT_INTERVAL"], variables["RAFTSET_CLEAN_INTERVAL"],
            variables["RAFTSET_CLEAN_GRACE"]) == ("4", "9", "120")
    assert variables["RAFTSET_DATA_DIR"] == contract.DATA_DIR
    assert (variables["RAFTSET_REPAIR_POLICY"], variables["RAFTSET_CRASH_LOOP_RESTARTS"]) == ("Manual", "5")
    assert variables["GRPC_DNS_RESOLVER"] == "native"  # gRPC without c-ares: 2.3 MiB less RSS
    assert all(isinstance(v, str) for k, v in variables.items() if k != "RAFTSET_POD_NAME")


def test_the_hash_check_interval_reaches_the_sidecar_only_when_it_is_not_the_default() -> None:
    """The sidecar's own default is the spec's: a cluster that leaves it alone keeps the pod template
    it had before the field existed, so an operator upgrade rolls nothing for it."""
    assert "RAFTSET_HASH_CHECK_INTERVAL" not in env(sidecar(pod_template(cluster())))
    tuned = cluster(maintenance={"hashCheckIntervalSeconds": 30})
    assert env(sidecar(pod_template(tuned)))["RAFTSET_HASH_CHECK_INTERVAL"] == "30"
    assert env(sidecar(pod_template(cluster(maintenance={"hashCheckIntervalSeconds": 0}))))[
        "RAFTSET_HASH_CHECK_INTERVAL"] == "0"


@pytest.mark.parametrize(("kind", "backend"), BOTH)
def test_pod_spec_basics(kind: str, backend: str) -> None:
    spec = pod_template(cluster(kind, backend))["spec"]
    assert spec["enableServiceLinks"] is False
    assert spec["serviceAccountName"] == "demo-member"
    assert spec["terminationGracePeriodSeconds"] >= 30
    for optional in ("nodeSelector", "tolerations", "priorityClassName"):
        assert optional not in spec


@pytest.mark.parametrize(("kind", "backend"), BOTH)
def test_by_default_the_store_requests_resources_and_members_spread_over_nodes_and_zones(
        kind: str, backend: str) -> None:
    """Fault j: the CRD promised a spread that was never rendered, and the store had no requests."""
    template = pod_template(cluster(kind, backend))
    spec = template["spec"]
    assert store(template)["resources"] == {"requests": {"cpu": "250m", "memory": "512Mi"}}
    selector = {"matchLabels": contract.selector_labels("demo")}
    (term,) = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"] == {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"]["podAntiAffinity"]
    assert spec["topologySpreadConstraints"] == [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                                  "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector}]
    # The selector matches the pods' own labels, or the spread would spread nothing.
    assert selector["matchLabels"].items() <= template["metadata"]["labels"].items()


def test_the_defaults_can_be_switched_off() -> None:
    template = pod_template(cluster(podTemplate={
        "resources": {"requests": {}}, "affinity": {}, "topologySpreadConstraints": []}))
    assert "affinity" not in template["spec"] and "topologySpreadConstraints" not in template["spec"]
    assert store(template)["resources"] == {"requests": {}}


def test_pod_overrides() -> None:
    overrides = {
        "labels": {"team": "db", contract.LABEL_INSTANCE: "hijack"},
        "annotations": {"prometheus.io/scrape": "true"},
        "resources": {"requests": {"cpu": "500m"}},
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}],
        "priorityClassName": "high",
    }
    template = pod_template(cluster(podTemplate=overrides))
    spec = template["spec"]
    assert template["metadata"]["labels"]["team"] == "db"
    # a user label can never steal the selector
    assert template["metadata"]["labels"][contract.LABEL_INSTANCE] == "demo"
    assert template["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    assert store(template)["resources"] == {"requests": {"cpu": "500m"}}
    assert spec["affinity"] == overrides["affinity"] and spec["nodeSelector"] == {"disk": "ssd"}
    assert spec["tolerations"] == overrides["tolerations"]
    assert spec["topologySpreadConstraints"] == overrides["topologySpreadConstraints"]
    assert spec["priorityClassName"] == "high"


def test_sidecar_resources() -> None:
    default = sidecar(pod_template(cluster()))["resources"]
    assert default["requests"] and default["limits"]["memory"]
    custom = sidecar(pod_template(cluster(sidecar={"resources": {"limits": {"memory": "1Gi"}}})))
    assert custom["resources"] == {"limits": {"memory": "1Gi"}}


# --- volumes ----------------------------------------------------------------------------------------

def volumes(c: Cluster) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod_template(c)["spec"]["volumes"]}


@pytest.mark.parametrize(("kind", "backend"), BOTH)
def test_persistent_data(kind: str, backend: str) -> None:
    c = cluster(kind, backend, storage={"size": "8Gi"})
    obj = workload_manifest(c, 3)
    assert "data" not in volumes(c)  # it comes from the claim template
    (claim,) = obj["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"] == {"requests": {"storage": "8Gi"}}
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert "storageClassName" not in claim["spec"]  # the cluster's default class
    assert claim["metadata"]["labels"].items() >= RECOMMENDED.items()


def test_storage_class() -> None:
    (claim,) = workload_manifest(cluster(storage={"storageClassName": "fast"}), 3)["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "fast"


@pytest.mark.parametrize(("kind", "backend"), BOTH)
def test_ephemeral_data(kind: str, backend: str) -> None:
    c = cluster(kind, backend, storage={"ephemeral": True})
    assert volumes(c)["data"] == {"name": "data", "emptyDir": {}}
    assert workload_manifest(c, 3)["spec"]["volumeClaimTemplates"] == []


@pytest.mark.parametrize(("scaled", "deleted"), [("Retain", "Retain"), ("Delete", "Retain"), ("Retain", "Delete")])
def test_retention_policy(scaled: str, deleted: str) -> None:
    c = cluster(storage={"retentionPolicy": {"whenScaled": scaled, "whenDeleted": deleted}})
    assert workload_manifest(c, 3)["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenScaled": scaled, "whenDeleted": deleted}


@pytest.mark.parametrize(("kind", "backend"), BOTH)
@pytest.mark.parametrize("provider", ["auto", "cert-manager", "disabled"])
def test_tls_volume_only_when_tls_is_on(kind: str, backend: str, provider: str) -> None:
    c = cluster(kind, backend, tls={"provider": provider})
    template = pod_template(c)
    on = provider != "disabled"
    assert ("tls" in volumes(c)) is on
    if on:
        sources = volumes(c)["tls"]["projected"]["sources"]
        assert [s["secret"]["name"] for s in sources] == ["demo-server-tls", "demo-peer-tls", "demo-client-tls"]
    for container in (sidecar(template), store(template)):
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["data"]["mountPath"] == contract.DATA_MOUNT
        assert mounts["run"]["mountPath"] == contract.RUN_MOUNT
        assert ("tls" in mounts) is on
        if on:
            assert mounts["tls"] == {"name": "tls", "mountPath": contract.TLS_MOUNT, "readOnly": True}
    # every mount has a volume or a claim template behind it
    assert volumes(c)["run"] == {"name": "run", "emptyDir": {}}


# --- Services -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("kind", "backend"), BOTH)
def test_services(kind: str, backend: str) -> None:
    c = cluster(kind, backend)
    peer, client = peer_service(c), client_service(c)
    template_labels = pod_template(c)["metadata"]["labels"]
    assert peer["metadata"]["name"] == "demo-peer" and client["metadata"]["name"] == "demo-client"
    assert peer["spec"]["clusterIP"] == "None"
    assert peer["spec"]["publishNotReadyAddresses"] is True
    assert {p["port"] for p in peer["spec"]["ports"]} == {contract.PEER_PORT, contract.CLIENT_PORT}
    assert client["spec"]["type"] == "ClusterIP"
    assert [p["port"] for p in client["spec"]["ports"]] == [contract.CLIENT_PORT]
    assert "publishNotReadyAddresses" not in client["spec"]  # clients only reach ready members
    for service in (peer, client):
        assert service["spec"]["selector"].items() <= template_labels.items()


# --- PodDisruptionBudget ----------------------------------------------------------------------------

@pytest.mark.parametrize(("replicas", "quorum"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)])
@pytest.mark.parametrize(("kind", "backend"), BOTH)
def test_pdb_min_available_is_the_quorum(kind: str, backend: str, replicas: int, quorum: int) -> None:
    pdb = pod_disruption_budget(cluster(kind, backend, replicas=replicas), replicas)
    assert pdb is not None
    assert (pdb["apiVersion"], pdb["kind"]) == ("policy/v1", "PodDisruptionBudget")
    assert pdb["spec"] == {"minAvailable": quorum, "selector": {"matchLabels": contract.selector_labels("demo")}}


@pytest.mark.parametrize("value", [0, 1, 5, "60%"])
def test_pdb_override(value: int | str) -> None:
    pdb = pod_disruption_budget(cluster(podDisruptionBudget={"minAvailable": value}), 7)
    assert pdb is not None and pdb["spec"]["minAvailable"] == value


@pytest.mark.parametrize("desired", range(1, 8))
@pytest.mark.parametrize("voters", range(0, 10))
def test_pdb_keeps_the_quorum_of_the_larger_of_desired_and_current_membership(desired: int, voters: int) -> None:
    """Fault a: during 5 -> 3 Raft still has 5 voters; the PDB must keep 3 of them, not 2."""
    pdb = pod_disruption_budget(cluster(replicas=desired), voters)
    assert pdb is not None and pdb["spec"]["minAvailable"] == max(desired, voters) // 2 + 1
    assert pod_disruption_budget(cluster(replicas=3), 5)["spec"]["minAvailable"] == 3  # type: ignore[index]


def test_pdb_disabled() -> None:
    c = cluster(podDisruptionBudget={"enabled": False, "minAvailable": 2})
    assert pod_disruption_budget(c, 3) is None
    assert "PodDisruptionBudget" not in [o["kind"] for o in owned_objects(c, 3)]


# --- RBAC, ownership, labels ------------------------------------------------------------------------

@pytest.mark.parametrize(("backend", "group"), [("StatefulSet", "apps"), ("AdvancedStatefulSet", "apps.kruise.io")])
def test_member_rbac(backend: str, group: str) -> None:
    account, role, binding = member_rbac(cluster(workload_kind=backend))
    assert (account["kind"], account["metadata"]["name"]) == ("ServiceAccount", "demo-member")
    assert role["kind"] == "Role" and binding["kind"] == "RoleBinding"
    rules = {tuple(r["resources"]): r for r in role["rules"]}
    assert rules[("leases",)]["apiGroups"] == ["coordination.k8s.io"]
    assert set(rules[("pods",)]["verbs"]) == {"get", "patch"}
    workload_rule = rules[("statefulsets",)]
    assert workload_rule == {"apiGroups": [group], "resources": ["statefulsets"],
                             "resourceNames": ["demo"], "verbs": ["get"]}
    assert not any("*" in r["verbs"] or "*" in r["resources"] for r in role["rules"])
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "demo-member"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "demo-member", "namespace": "db"}]


@pytest.mark.parametrize(("kind", "backend"), BOTH)
def test_owned_objects_in_apply_order(kind: str, backend: str) -> None:
    objects = owned_objects(cluster(kind, backend), 3, [])
    assert [o["kind"] for o in objects] == [
        "ServiceAccount", "Role", "RoleBinding", "Service", "Service", "Service", "PodDisruptionBudget",
        "StatefulSet"]
    assert objects[-1]["spec"]["replicas"] == 3


@pytest.mark.parametrize(("kind", "backend"), BOTH)
def test_every_object_is_owned_and_labelled(kind: str, backend: str) -> None:
    c = cluster(kind, backend)
    engine = "etcd" if kind == contract.KIND_ETCD else "xline"
    for obj in owned_objects(c, 3):
        meta = obj["metadata"]
        assert meta["namespace"] == "db"
        assert meta["ownerReferences"] == [{
            "apiVersion": "raftset.dev/v1alpha1", "kind": kind, "name": "demo", "uid": "0b1c2d3e-uid",
            "controller": True, "blockOwnerDeletion": True,
        }], obj["kind"]
        labels = meta["labels"]
        assert labels.items() >= RECOMMENDED.items(), obj["kind"]
        assert labels[contract.LABEL_COMPONENT] in {"member", "peer", "client", "metrics"}
        assert labels[contract.LABEL_CLUSTER] == "demo" and labels[contract.LABEL_ENGINE] == engine
    pod_labels = pod_template(c)["metadata"]["labels"]
    assert pod_labels.items() >= {**RECOMMENDED, contract.LABEL_COMPONENT: "member"}.items()


def test_renderers_are_pure() -> None:
    c = cluster(podTemplate={"labels": {"a": "b"}, "tolerations": [{"key": "k"}]})
    first = owned_objects(c, 3, [1])
    first[-1]["spec"]["template"]["metadata"]["labels"]["a"] = "mutated"
    first[-1]["spec"]["template"]["spec"]["tolerations"].append({"key": "x"})
    again = owned_objects(c, 3, [1])
    assert again[-1]["spec"]["template"]["metadata"]["labels"]["a"] == "b"
    assert again[-1]["spec"]["template"]["spec"]["tolerations"] == [{"key": "k"}]
    assert again == owned_objects(c, 3, [1])


@pytest.mark.parametrize(("event", "obj", "edited"), [
    ("DELETED", {}, True),
    ("ADDED", {"metadata": {"generation": 1}}, False),
    ("MODIFIED", {"metadata": {"generation": 3}, "status": {"observedGeneration": 3}}, False),  # status churn
    ("MODIFIED", {"metadata": {"generation": 4}, "status": {"observedGeneration": 3}}, True),  # a spec edit
    ("MODIFIED", {"metadata": {}, "spec": {"clusterIP": "None"}}, True),  # a Service: no generation
    (None, {"metadata": {"generation": 1}}, False),  # the initial listing
])
def test_which_watch_events_are_someone_elses_edit(event: str | None, obj: dict[str, Any], edited: bool) -> None:
    assert edited_behind_our_back(event, obj) is edited


def test_the_workload_carries_the_scale_step_it_is_written_with() -> None:
    step = ScaleStep(SCALE_IN, "demo-2", "3", 100, "2026-01-01T12:00:00Z")
    annotations = workload_manifest(cluster("EtcdCluster", "StatefulSet"), 2, scale_step=step)["metadata"]
    assert parse_step(annotations["annotations"][contract.ANNOTATION_SCALE_STEP]) == step
    without = workload_manifest(cluster("EtcdCluster", "StatefulSet"), 2)["metadata"].get("annotations") or {}
    assert contract.ANNOTATION_SCALE_STEP not in without  # server-side apply drops a confirmed record


def test_an_indexed_object_is_a_copy_without_managed_fields() -> None:
    obj = {"metadata": {"name": "demo", "annotations": {"a": "b"}, "managedFields": [{"manager": "x"}]},
           "spec": {"replicas": 3}}
    kept = cached(obj)
    assert kept == {"metadata": {"name": "demo", "annotations": {"a": "b"}}, "spec": {"replicas": 3}}
    kept["spec"]["replicas"] = 5
    kept["metadata"]["annotations"]["a"] = "c"
    assert obj["spec"]["replicas"] == 3 and obj["metadata"]["annotations"]["a"] == "b"
    assert "managedFields" in obj["metadata"]


def test_a_cached_workload_keeps_what_the_rounds_read_and_drops_the_pod_specs_bulk() -> None:
    c = cluster(replicas=3)
    manifest = workload_manifest(c, 3, (), tls_revision="r7", claims=None)
    live = {**manifest, "status": {"replicas": 3, "updatedReplicas": 3, "updateRevision": "demo-1"}}
    kept = cached(live)
    template = kept["spec"]["template"]
    assert template["spec"] == {"containers": [{k: container[k] for k in ("name", "image")}
                                               for container in manifest["spec"]["template"]["spec"]["containers"]]}
    assert template["metadata"] == manifest["spec"]["template"]["metadata"]
    assert {k: v for k, v in kept["spec"].items() if k != "template"} == {
        k: v for k, v in manifest["spec"].items() if k != "template"}
    assert kept["status"] == live["status"] and kept["metadata"] == manifest["metadata"]
    # What the rounds read from it reads the same as from the whole object.
    assert status.running_version(kept, c.engine.name) == status.running_version(live, c.engine.name) is not None
    assert tls.running_revision(kept) == tls.running_revision(live) == "r7"
    assert storage.template_size(kept) == storage.template_size(live) is not None
    assert storage.decide("1Gi", kept) == storage.decide("1Gi", live)
    assert len(json.dumps(kept)) < len(json.dumps(live)) / 2


def test_pdb_leaves_the_leaving_pods_out_by_name_and_restores_the_plain_selector_without_them() -> None:
    """A scale-in step's victim stops counting as available before the step: the other members must
    make up the quorum of the voters Raft still counts, the victim included (issue 26)."""
    c = cluster(replicas=3)
    pdb = pod_disruption_budget(c, 4, ["demo-3", "demo-3"])
    assert pdb is not None and pdb["spec"] == {"minAvailable": 3, "selector": {
        "matchLabels": contract.selector_labels("demo"),
        "matchExpressions": [{"key": "statefulset.kubernetes.io/pod-name", "operator": "NotIn", "values": ["demo-3"]}]}}
    assert pod_disruption_budget(c, 3, []) == pod_disruption_budget(c, 3)
    assert "matchExpressions" not in pod_disruption_budget(c, 3)["spec"]["selector"]  # type: ignore[index]


def test_the_leaving_pods_are_the_steps_victim_and_the_victim_raft_has_yet_to_confirm() -> None:
    step = ScaleStep(SCALE_IN, "demo-4", "04", 100, "2026-01-01T00:00:00Z")
    taking = Plan(4, (), SCALE_IN, "", scale_away=("demo-4",), record=step)
    waiting = Plan(4, (), "wait", "", record=step)
    joining = Plan(5, (), "wait", "", record=ScaleStep("scale-out", "demo-4", "", 100, "2026-01-01T00:00:00Z"))
    refused = Plan(5, (), "wait", "", refused=True)
    assert [leaving_pods(p) for p in (taking, waiting, joining, refused)] == [("demo-4",), ("demo-4",), (), ()]


def test_disrupted_pods_are_read_from_the_budgets_status() -> None:
    assert disrupted_pods(None) == {} == disrupted_pods({"status": {}}) == disrupted_pods({})
    assert disrupted_pods({"status": {"disruptedPods": {"demo-0": "2026-01-01T00:00:00Z"}}}) == \
        {"demo-0": "2026-01-01T00:00:00Z"}


MANIFEST = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "demo", "namespace": "db"}, "spec": {"a": 1}}


def test_an_objects_ref_names_its_version_kind_namespace_and_name() -> None:
    assert objects.ref(MANIFEST) == "v1/Service/db/demo"
    assert objects.ref({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                        "metadata": {"name": "x"}}) == "rbac.authorization.k8s.io/v1/ClusterRole//x"


def test_a_digest_is_of_the_content_not_of_its_key_order() -> None:
    reordered = {"spec": {"a": 1}, "metadata": {"namespace": "db", "name": "demo"}, "kind": "Service",
                 "apiVersion": "v1"}
    assert objects.digest(reordered) == objects.digest(MANIFEST)
    assert objects.digest({**MANIFEST, "spec": {"a": 2}}) != objects.digest(MANIFEST)


@pytest.mark.parametrize(("manifest", "live", "read", "kept"), [
    (MANIFEST, None, False, True),  # not read by the round: the drift watches and the resync stand guard
    ({**MANIFEST, "spec": {"a": 2}}, None, False, False),  # rendered differently
    (MANIFEST, {"metadata": {"generation": 3}}, True, True),  # read, nobody moved its generation
    (MANIFEST, {"metadata": {"generation": 4}}, True, False),  # someone edited its spec
    (MANIFEST, None, True, False),  # read and gone
])
def test_an_object_is_still_applied_only_when_rendered_alike_and_unchanged_since(
        manifest: dict[str, Any], live: dict[str, Any] | None, read: bool, kept: bool) -> None:
    mark = objects.applied_mark(MANIFEST, {"metadata": {"generation": 3}})
    assert objects.still_applied(mark, manifest, live, read=read) is kept


def test_no_mark_means_apply() -> None:
    assert not objects.still_applied(None, MANIFEST, None, read=False)


def test_a_kind_without_generations_is_marked_by_its_content_alone() -> None:
    mark = objects.applied_mark(MANIFEST, {"metadata": {}})
    assert mark.endswith("@") and objects.still_applied(mark, MANIFEST, None, read=False)
