"""The install manifests: both overlays render through the real `kubectl kustomize`.

kubectl is part of the machine's toolset (see the brief); if it is missing these tests
fail, they do not skip.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from raftset import contract, engines, workloads
from raftset.operator.pure import settings
from raftset.operator.components import tls
from tools import crdgen
from tools.devcluster import versions

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE = ROOT / "kustomize"
OVERLAYS = {"statefulset": workloads.STATEFULSET.name, "kruise": workloads.ADVANCED_STATEFULSET.name}
NAMESPACE = "raftset-system"
OPERATOR = "raftset-operator"
SECRETS_ROLE = "raftset-operator-secrets"
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}


@lru_cache
def render(path: str) -> tuple[dict[str, Any], ...]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with its built-in kustomize) is required for these tests"
    done = subprocess.run([kubectl, "kustomize", str(KUSTOMIZE / path)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return tuple(d for d in yaml.safe_load_all(done.stdout) if d)


def only(docs: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def operator_container(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    deployment = only(docs, "Deployment", OPERATOR)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def rules(docs: Iterable[dict[str, Any]], name: str | None = None) -> list[dict[str, Any]]:
    """Rules of every (Cluster)Role, or of the one called `name`."""
    return [r for d in docs if d["kind"] in ("ClusterRole", "Role") and name in (None, d["metadata"]["name"])
            for r in d["rules"]]


def allows(docs: Iterable[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(group in r.get("apiGroups", []) and resource in r.get("resources", []) and verb in r["verbs"]
               for r in rules(docs))


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_overlay_renders_the_expected_objects(overlay: str) -> None:
    docs = render(f"overlays/{overlay}")
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert kinds == sorted([
        ("Namespace", NAMESPACE),
        ("CustomResourceDefinition", f"{contract.PLURAL_ETCD}.{contract.GROUP}"),
        ("CustomResourceDefinition", f"{contract.PLURAL_XLINE}.{contract.GROUP}"),
        ("ServiceAccount", OPERATOR),
        ("ClusterRole", OPERATOR),
        ("ClusterRole", SECRETS_ROLE),
        ("ClusterRoleBinding", OPERATOR),
        ("Deployment", OPERATOR),
    ])
    for doc in docs:
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "raftset"


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_overlay_carries_the_generated_crds(overlay: str) -> None:
    docs = render(f"overlays/{overlay}")
    for engine in engines.ENGINES.values():
        generated = crdgen.crd(engine)
        rendered = only(docs, "CustomResourceDefinition", generated["metadata"]["name"])
        assert rendered["spec"] == generated["spec"]


@pytest.mark.parametrize(("overlay", "kind"), sorted(OVERLAYS.items()))
def test_default_workload_kind_comes_from_the_overlay(overlay: str, kind: str) -> None:
    env = {e["name"]: e.get("value") for e in operator_container(render(f"overlays/{overlay}"))["env"]}
    assert env["RAFTSET_DEFAULT_WORKLOAD_KIND"] == kind
    assert kind in workloads.BACKENDS


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_each_overlay_enables_exactly_the_backends_its_rbac_grants(overlay: str) -> None:
    """The operator watches the enabled backends' workloads: one its ClusterRole does not let it
    list and watch would end it (kopf gives up on a forbidden watch), where its CRD exists."""
    docs = render(f"overlays/{overlay}")
    env = {e["name"]: e.get("value") for e in operator_container(docs)["env"]}
    enabled = settings.enabled_backends(env.get("RAFTSET_BACKENDS"), env["RAFTSET_DEFAULT_WORKLOAD_KIND"])
    granted = {name for name, b in workloads.BACKENDS.items()
               if all(allows(docs, b.group, b.plural, verb) for verb in ("get", "list", "watch", "create", "patch"))}
    assert set(enabled) == granted


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_operator_deployment(overlay: str) -> None:
    docs = render(f"overlays/{overlay}")
    deployment = only(docs, "Deployment", OPERATOR)
    pod = deployment["spec"]["template"]["spec"]
    container = operator_container(docs)
    assert pod["serviceAccountName"] == OPERATOR
    assert container["image"] == "ghcr.io/raftset/raftset:0.1.0"
    assert container["command"] == [OPERATOR]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert OPERATOR in scripts and "raftset-sidecar" in scripts
    # The probes ask kopf's liveness endpoint, on the port the flag opens.
    (liveness,) = [a for a in container["args"] if a.startswith("--liveness=")]
    port, path = re.fullmatch(r"--liveness=http://0\.0\.0\.0:(\d+)(/\S+)", liveness).groups()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == path and ports[get["port"]] == int(port), probe
    security = container["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/tmp"}  # the only writable place
    # HA: two replicas, only the holder of the operator Lease acts (raftset.operator.election).
    assert deployment["spec"]["replicas"] == 2 and "--leader-elect" in container["args"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
    assert env["POD_NAME"] == "metadata.name" and env["POD_NAMESPACE"] == "metadata.namespace"


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_rbac_binds_the_operators_service_account(overlay: str) -> None:
    docs = render(f"overlays/{overlay}")
    binding = only(docs, "ClusterRoleBinding", OPERATOR)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": OPERATOR}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": OPERATOR, "namespace": NAMESPACE}]
    assert only(docs, "ServiceAccount", OPERATOR)["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_rbac_has_no_wildcards(overlay: str) -> None:
    for rule in rules(render(f"overlays/{overlay}")):
        for key in ("apiGroups", "resources", "verbs"):
            assert not any("*" in item for item in rule.get(key, [])), rule
        assert "nonResourceURLs" not in rule and "resourceNames" not in rule, rule
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule


# What the operator does (and, for leases, pods and workloads, what it grants the
# sidecars: the apiserver refuses a Role granting more than its creator holds).
NEEDED = [
    (contract.GROUP, plural, verb) for plural in (contract.PLURAL_ETCD, contract.PLURAL_XLINE)
    for verb in ("get", "list", "watch", "patch")
] + [
    (contract.GROUP, f"{plural}/status", "patch") for plural in (contract.PLURAL_ETCD, contract.PLURAL_XLINE)
] + [
    (contract.GROUP, f"{plural}/finalizers", "update") for plural in (contract.PLURAL_ETCD, contract.PLURAL_XLINE)
] + [
    (group, resource, verb)
    for group, resource in (("apps", "statefulsets"), ("", "services"), ("policy", "poddisruptionbudgets"),
                            ("", "secrets"), ("", "serviceaccounts"), ("rbac.authorization.k8s.io", "roles"),
                            ("rbac.authorization.k8s.io", "rolebindings"), ("cert-manager.io", "issuers"),
                            ("cert-manager.io", "certificates"), ("coordination.k8s.io", "leases"))
    for verb in ("get", "create", "patch")  # server-side apply
] + [
    (group, resource, verb)  # watched by kopf: drift and the heartbeat index
    for group, resource in (("apps", "statefulsets"), ("", "services"), ("policy", "poddisruptionbudgets"),
                            ("coordination.k8s.io", "leases"))
    for verb in ("list", "watch")
] + [
    ("", "pods", "get"), ("", "pods", "list"), ("", "pods", "watch"), ("", "pods", "patch"),
    ("", "pods", "delete"),  # a roll restarts one member pod at a time
    ("", "persistentvolumeclaims", "list"), ("", "persistentvolumeclaims", "patch"),
    # node loss: a lost member's node and volume read, its claim deleted once Raft removed it
    ("", "nodes", "get"), ("", "persistentvolumes", "get"),
    ("", "persistentvolumeclaims", "get"), ("", "persistentvolumeclaims", "delete"),
    ("coordination.k8s.io", "leases", "update"), ("coordination.k8s.io", "leases", "delete"),
    ("", "events", "create"), ("", "events", "patch"),
    ("", "events", "list"), ("storage.k8s.io", "storageclasses", "list"),  # naming why a claim is Pending
    ("events.k8s.io", "events", "create"), ("events.k8s.io", "events", "patch"),
    ("", "namespaces", "list"), ("", "namespaces", "watch"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "get"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
]

# Least privilege: things the operator never does.
NOT_NEEDED = [
    ("", "pods", "create"), ("", "pods/exec", "create"),
    ("", "nodes", "list"), ("", "nodes", "patch"), ("", "namespaces", "create"), ("", "namespaces", "delete"),
    ("", "persistentvolumeclaims", "create"), ("", "persistentvolumes", "delete"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "create"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "patch"),
    ("rbac.authorization.k8s.io", "clusterroles", "create"),
    ("rbac.authorization.k8s.io", "clusterrolebindings", "create"),
    ("apps", "deployments", "create"), ("", "configmaps", "create"),
    (contract.GROUP, contract.PLURAL_ETCD, "create"), (contract.GROUP, contract.PLURAL_ETCD, "delete"),
    # owned objects go through garbage collection; Secrets are read by name only
    ("apps", "statefulsets", "delete"), ("", "services", "delete"),
    ("", "secrets", "list"), ("", "secrets", "watch"), ("", "secrets", "delete"),
]


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
@pytest.mark.parametrize(("group", "resource", "verb"), NEEDED)
def test_rbac_allows_what_the_operator_needs(overlay: str, group: str, resource: str, verb: str) -> None:
    assert allows(render(f"overlays/{overlay}"), group, resource, verb)


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
@pytest.mark.parametrize(("group", "resource", "verb"), NOT_NEEDED)
def test_rbac_refuses_what_the_operator_does_not_need(overlay: str, group: str, resource: str, verb: str) -> None:
    assert not allows(render(f"overlays/{overlay}"), group, resource, verb)


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_secrets_come_only_from_a_role_bound_per_namespace(overlay: str) -> None:
    """The cluster-wide binding grants no Secret at all; the secrets ClusterRole grants the auto
    provider's get/create/patch and nothing else, and the overlay binds it nowhere."""
    docs = render(f"overlays/{overlay}")
    assert not any("secrets" in r.get("resources", []) for r in rules(docs, OPERATOR))
    assert rules(docs, SECRETS_ROLE) == [{"apiGroups": [""], "resources": ["secrets"],
                                          "verbs": ["get", "create", "patch"]}]
    assert not [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
                and d["roleRef"]["name"] == SECRETS_ROLE]
    assert tls.SECRETS_ROLE == SECRETS_ROLE  # the name the Degraded message tells users to bind


@pytest.mark.parametrize("verb", ["get", "list", "watch", "create", "patch"])
def test_only_the_kruise_overlay_manages_advanced_statefulsets(verb: str) -> None:
    backend = workloads.ADVANCED_STATEFULSET
    assert allows(render("overlays/kruise"), backend.group, backend.plural, verb)
    assert not allows(render("overlays/statefulset"), backend.group, backend.plural, verb)


def test_overlays_differ_only_in_kruise_rbac_default_kind_and_backends() -> None:
    sts, kruise = render("overlays/statefulset"), render("overlays/kruise")
    assert rules(kruise, OPERATOR)[:-1] == rules(sts, OPERATOR)
    assert rules(kruise, OPERATOR)[-1]["apiGroups"] == [workloads.ADVANCED_STATEFULSET.group]
    assert rules(kruise, SECRETS_ROLE) == rules(sts, SECRETS_ROLE)
    strip = [d for d in sts if d["kind"] not in ("ClusterRole", "Deployment")]
    assert strip == [d for d in kruise if d["kind"] not in ("ClusterRole", "Deployment")]


def test_samples_render_one_cluster_per_kind() -> None:
    docs = render("samples")
    assert sorted(d["kind"] for d in docs) == sorted(e.kind for e in engines.ENGINES.values())
    for doc in docs:
        assert doc["apiVersion"] == contract.API_VERSION
        assert "workloadKind" not in doc["spec"], "samples follow the overlay's default workload kind"


def test_dockerfile_runs_as_the_deployments_non_root_user() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    # The bases are build arguments (the real-node lab passes local ones); by default the etcd
    # image only lends etcdutl (the sidecar's restore), of the default etcd release, and the Rust
    # stage builds xlineutl from the Xline commit and toolchain the tests build.
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", dockerfile, re.M))
    stages = re.findall(r"^FROM \S+ AS (\S+)$", dockerfile, re.M)
    froms = [re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], f) for f in re.findall(r"^FROM (\S+)", dockerfile, re.M)]
    rust = f"rust:{versions.RUST_TOOLCHAIN}-bookworm"
    assert froms and all(f in ("python:3.11-slim", engines.ETCD.image(), rust, *stages) for f in froms)
    assert args["XLINEUTL_FROM"] in stages
    assert "COPY --from=etcd /usr/local/bin/etcdutl /usr/local/bin/etcdutl" in dockerfile
    assert re.search(rf"git -C /xline checkout {versions.XLINE_COMMIT}\b", dockerfile)
    assert "install -m 0755 target/release/xlineutl /usr/local/bin/xlineutl" in dockerfile
    assert "COPY --from=xline /usr/local/bin/xlineutl /usr/local/bin/xlineutl" in dockerfile
    (user,) = re.findall(r"^USER (\d+):(\d+)$", dockerfile, re.M)
    pod = only(render("overlays/statefulset"), "Deployment", OPERATOR)["spec"]["template"]["spec"]
    assert (int(user[0]), int(user[1])) == (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"])
    assert int(user[0]) != 0
    for folder in ("raftset/", "operator/", "sidecar/", "plugin/"):
        assert f"COPY {folder} {folder}" in dockerfile


# --- the operator's renderers against its RBAC ------------------------------------------------------

# API of each kind the operator may write: (group, plural).
RESOURCES = {
    ("apps/v1", "StatefulSet"): ("apps", "statefulsets"),
    ("apps.kruise.io/v1beta1", "StatefulSet"): ("apps.kruise.io", "statefulsets"),
    ("v1", "Service"): ("", "services"),
    ("v1", "Secret"): ("", "secrets"),
    ("v1", "ServiceAccount"): ("", "serviceaccounts"),
    ("policy/v1", "PodDisruptionBudget"): ("policy", "poddisruptionbudgets"),
    ("rbac.authorization.k8s.io/v1", "Role"): ("rbac.authorization.k8s.io", "roles"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("rbac.authorization.k8s.io", "rolebindings"),
    ("cert-manager.io/v1", "Issuer"): ("cert-manager.io", "issuers"),
    ("cert-manager.io/v1", "Certificate"): ("cert-manager.io", "certificates"),
}


def rendered_clusters(workload_kind: str) -> list[list[dict[str, Any]]]:
    from raftset.operator.pure import spec
    from tests.unit.builders import owned_objects

    out = []
    for path in sorted((KUSTOMIZE / "samples").glob("*cluster.yaml")):
        body = yaml.safe_load(path.read_text())
        body["metadata"].update(namespace="db", uid="00000000-0000-0000-0000-000000000001")
        body["spec"]["workloadKind"] = workload_kind
        cluster = spec.parse(body, default_workload_kind=workload_kind)
        out.append(owned_objects(cluster, 3))
    return out


@pytest.mark.parametrize(("overlay", "workload_kind"), [
    ("statefulset", "StatefulSet"), ("kruise", "StatefulSet"), ("kruise", "AdvancedStatefulSet")])
def test_operator_may_write_and_grant_everything_it_renders(overlay: str, workload_kind: str) -> None:
    docs = render(f"overlays/{overlay}")
    for objects in rendered_clusters(workload_kind):
        assert objects
        for obj in objects:
            key = (obj["apiVersion"], obj["kind"])
            assert key in RESOURCES, f"no RBAC known for {key}: add it to the ClusterRole and to RESOURCES"
            group, plural = RESOURCES[key]
            for verb in ("get", "create", "patch"):  # server-side apply
                assert allows(docs, group, plural, verb), (key, verb)
            # The apiserver refuses a Role granting more than its creator holds.
            for rule in obj.get("rules", []) if obj["kind"] == "Role" else []:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            assert allows(docs, group, resource, verb), (group, resource, verb)


def test_the_image_installs_only_the_shipped_namespace() -> None:
    """Dev tooling (tools/: the control-plane builder, the stand-in kubelet, crdgen) never ships."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    copied = {src for line in re.findall(r"^COPY (?!--from)(.+)$", dockerfile, re.M) for src in line.split()[:-1]}
    assert copied == {"pyproject.toml", "README.md", "raftset/", "operator/", "sidecar/", "plugin/"}
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {"raftset"} | {
        ".".join(init.parent.relative_to(ROOT / side).parts)
        for side in ("operator", "sidecar", "plugin") for init in (ROOT / side).rglob("__init__.py")}
    assert sorted(setuptools["packages"]) == sorted(packages), "every package folder ships, and nothing else"
    assert not list((ROOT / "raftset").rglob("devcluster")) and not (ROOT / "raftset" / "crdgen.py").exists()


def test_a_modules_path_names_it() -> None:
    """Folder = import path: operator/raftset/operator/x.py is raftset.operator.x."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package, folder in setuptools["package-dir"].items():
        assert folder.endswith(package.replace(".", "/")), (package, folder)
    for folder in ("raftset", "operator/raftset", "sidecar/raftset", "plugin/raftset"):
        assert not (ROOT / folder / "__init__.py").exists(), f"{folder} must stay a namespace portion"
