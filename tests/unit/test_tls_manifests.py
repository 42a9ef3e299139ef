"""TLS in the rendered objects: the projected volume, cert-manager's objects, the member
Role, and the provider shell's decisions against an in-memory API."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from raftset import contract
from raftset.engines import ENGINES, TLSFiles
from raftset.operator.components import tls
from raftset.operator.components.backup_requests import backup_request_lease
from raftset.operator.components.member_rbac import member_rbac
from raftset.operator.components.workload import workload_manifest
from raftset.operator.pure.pod_template import pod_template
from raftset.operator.pure import certmanager
from raftset.operator.pure import certificates
from raftset.operator.pure import spec
from tests.unit.builders import NOW, body, cluster, owned_objects

pytestmark = pytest.mark.unit

PROVIDERS_ON = ["auto", "cert-manager"]
KINDS = [contract.KIND_ETCD, contract.KIND_XLINE]


def tls_volume(c: spec.Cluster) -> dict[str, Any] | None:
    found = [v for v in pod_template(c)["spec"]["volumes"] if v["name"] == "tls"]
    return found[0] if found else None


def mounted_files(volume: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """path inside the mount -> (secret, key)."""
    return {item["path"]: (source["secret"]["name"], item["key"])
            for source in volume["projected"]["sources"] for item in source["secret"]["items"]}


# --- the pod ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("provider", PROVIDERS_ON)
def test_one_projected_volume_maps_the_three_secrets_onto_the_tls_files(kind: str, provider: str) -> None:
    volume = tls_volume(cluster(kind, tls={"provider": provider}))
    assert volume is not None
    files = TLSFiles.under()
    expected = {
        files.ca: ("demo-server-tls", "ca.crt"),
        files.server_cert: ("demo-server-tls", "tls.crt"),
        files.server_key: ("demo-server-tls", "tls.key"),
        files.peer_cert: ("demo-peer-tls", "tls.crt"),
        files.peer_key: ("demo-peer-tls", "tls.key"),
        files.client_cert: ("demo-client-tls", "tls.crt"),
        files.client_key: ("demo-client-tls", "tls.key"),
    }
    assert {f"{contract.TLS_MOUNT}/{path}": where for path, where in mounted_files(volume).items()} == expected
    assert volume["projected"]["defaultMode"] == 0o440


def test_both_providers_render_the_same_pod() -> None:
    auto = pod_template(cluster(tls={"provider": "auto"}))
    managed = pod_template(cluster(tls={"provider": "cert-manager"}))
    assert auto == managed


@pytest.mark.parametrize("kind", KINDS)
def test_disabled_mounts_nothing_and_speaks_http(kind: str) -> None:
    c = cluster(kind, tls={"provider": "disabled"})
    template = pod_template(c, tls_revision="3")
    assert tls_volume(c) is None
    for container in (*template["spec"]["initContainers"], *template["spec"]["containers"]):
        assert all(m["name"] != "tls" for m in container["volumeMounts"])
    env = {e["name"]: e.get("value") for e in template["spec"]["initContainers"][0]["env"]}
    assert env["RAFTSET_TLS_DIR"] == ""
    assert all(env[k].startswith("http://") for k in
               ("RAFTSET_PEER_URL_TEMPLATE", "RAFTSET_CLIENT_URL_TEMPLATE", "RAFTSET_LISTEN_PEER_URL"))
    assert contract.ANNOTATION_TLS_REVISION not in template["metadata"]["annotations"]


@pytest.mark.parametrize("provider", PROVIDERS_ON)
def test_tls_speaks_https_from_the_mounted_directory(provider: str) -> None:
    template = pod_template(cluster(tls={"provider": provider}))
    env = {e["name"]: e.get("value") for e in template["spec"]["initContainers"][0]["env"]}
    assert env["RAFTSET_TLS_DIR"] == contract.TLS_MOUNT
    assert env["RAFTSET_PEER_URL_TEMPLATE"] == "https://{pod}.demo-peer.db.svc:2380"


def test_the_tls_revision_is_a_pod_annotation_so_renewal_rolls_the_pods() -> None:
    c = cluster(podTemplate={"annotations": {"team": "kv"}})
    one = workload_manifest(c, 3, tls_revision="1")["spec"]["template"]["metadata"]["annotations"]
    two = workload_manifest(c, 3, tls_revision="2")["spec"]["template"]["metadata"]["annotations"]
    assert one == {"team": "kv", contract.ANNOTATION_TLS_REVISION: "1"}
    assert two[contract.ANNOTATION_TLS_REVISION] == "2"
    assert contract.ANNOTATION_TLS_REVISION not in workload_manifest(c, 3)["spec"]["template"]["metadata"]["annotations"]
    (objects_workload,) = [o for o in owned_objects(c, 3, tls_revision="5") if o["kind"] == "StatefulSet"]
    assert objects_workload["spec"]["template"]["metadata"]["annotations"][contract.ANNOTATION_TLS_REVISION] == "5"


# --- operator-owned flags: TLS files included ------------------------------------------------------

@pytest.mark.parametrize(("kind", "flag"), [
    (contract.KIND_ETCD, "cert-file"), (contract.KIND_ETCD, "peer-key-file"),
    (contract.KIND_ETCD, "client-cert-auth"), (contract.KIND_ETCD, "auto-tls"),
    (contract.KIND_ETCD, "listen-client-urls"), (contract.KIND_ETCD, "--trusted-ca-file"),
    (contract.KIND_XLINE, "client-cert-path"), (contract.KIND_XLINE, "peer-ca-cert-path"),
    (contract.KIND_XLINE, "client-listen-urls"), (contract.KIND_XLINE, "members"),
])
def test_options_may_not_replace_what_the_operator_owns(kind: str, flag: str) -> None:
    with pytest.raises(spec.InvalidSpec, match=f"may not set {flag}:"):
        spec.parse(body(kind, options={flag: "x", "snapshot-count": "5"}), default_workload_kind="StatefulSet")


@pytest.mark.parametrize("engine", ENGINES.values(), ids=list(ENGINES))
def test_every_tls_flag_is_owned(engine: Any) -> None:
    tls_flags = {flag for flag in engine.owned_flags if "cert" in flag or "key" in flag or "tls" in flag}
    assert len(tls_flags) >= 6
    assert engine.refused_options({flag: "x" for flag in tls_flags}) == sorted(tls_flags)


@pytest.mark.parametrize("kind", KINDS)
def test_options_the_operator_does_not_own_pass(kind: str) -> None:
    c = spec.parse(body(kind, options={"log-level": "debug"}), default_workload_kind="StatefulSet")
    assert c.options == {"log-level": "debug"}


# --- cert-manager ------------------------------------------------------------------------------------

def by_name(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_cert_manager_builds_its_own_ca_chain_without_an_issuer_ref() -> None:
    c = cluster(tls={"provider": "cert-manager"})
    objects = certmanager.objects(c)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Issuer", "demo-selfsigned"), ("Certificate", "demo-ca"), ("Issuer", "demo-ca"),
        ("Certificate", "demo-server-tls"), ("Certificate", "demo-peer-tls"), ("Certificate", "demo-client-tls")]
    found = by_name(objects)
    assert found[("Issuer", "demo-selfsigned")]["spec"] == {"selfSigned": {}}
    ca = found[("Certificate", "demo-ca")]["spec"]
    assert ca["isCA"] is True and ca["secretName"] == "demo-ca"
    assert ca["issuerRef"] == {"name": "demo-selfsigned", "kind": "Issuer", "group": "cert-manager.io"}
    assert ca["duration"] == "87600h"
    assert found[("Issuer", "demo-ca")]["spec"] == {"ca": {"secretName": "demo-ca"}}
    for purpose in certificates.PURPOSES:
        leaf = found[("Certificate", f"demo-{purpose}-tls")]["spec"]
        assert leaf["issuerRef"] == {"name": "demo-ca", "kind": "Issuer", "group": "cert-manager.io"}
    for obj in objects:
        assert obj["apiVersion"] == "cert-manager.io/v1"
        assert obj["metadata"]["namespace"] == "db"
        assert obj["metadata"]["ownerReferences"] == [c.owner_reference]
        assert obj["metadata"]["labels"][contract.LABEL_INSTANCE] == "demo"


@pytest.mark.parametrize(("ref", "expected"), [
    ({"name": "corp-ca", "kind": "ClusterIssuer"}, {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}),
    ({"name": "vault"}, {"name": "vault", "kind": "Issuer", "group": "cert-manager.io"}),
    ({"name": "x", "kind": "Issuer", "group": "example.com"}, {"name": "x", "kind": "Issuer", "group": "example.com"}),
])
def test_cert_manager_uses_the_users_issuer(ref: dict[str, str], expected: dict[str, str]) -> None:
    objects = certmanager.objects(cluster(tls={"provider": "cert-manager", "issuerRef": ref}))
    assert [o["kind"] for o in objects] == ["Certificate"] * 3
    assert all(o["spec"]["issuerRef"] == expected for o in objects)


@pytest.mark.parametrize("purpose", certificates.PURPOSES)
def test_cert_manager_certificates_say_what_auto_issues(purpose: str) -> None:
    c = cluster(tls={"provider": "cert-manager"})
    leaf = certificates.leaf_specs("demo", "db", c.replicas)[purpose]
    cert = by_name(certmanager.objects(c))[("Certificate", f"demo-{purpose}-tls")]["spec"]
    assert cert["secretName"] == f"demo-{purpose}-tls"
    assert cert["commonName"] == leaf.common_name
    assert cert.get("dnsNames", []) == list(leaf.dns_names)
    assert cert.get("ipAddresses", []) == list(leaf.ip_addresses)
    expected_usages = {"digital signature"} | ({"server auth"} if leaf.server_auth else set()) \
        | ({"client auth"} if leaf.client_auth else set())
    assert set(cert["usages"]) == expected_usages
    assert (cert["duration"], cert["renewBefore"]) == ("8760h", "720h")
    assert cert["privateKey"]["algorithm"] == "ECDSA"
    assert cert["secretTemplate"]["labels"][contract.LABEL_INSTANCE] == "demo"


@pytest.mark.parametrize(("found", "revision"), [
    ({}, "1.1.1"),  # not issued yet: the first issue must not roll the pods
    ({"server": {"status": {"revision": 1}}, "peer": {"status": {}}, "client": None}, "1.1.1"),
    ({"server": {"status": {"revision": 2}}, "peer": {"status": {"revision": 2}},
      "client": {"status": {"revision": 3}}}, "2.2.3"),
])
def test_cert_manager_revision(found: dict[str, Any], revision: str) -> None:
    assert certmanager.revision(found) == revision


# --- the member Role ------------------------------------------------------------------------------

def rules(c: spec.Cluster, ordinals: int = 0) -> list[dict[str, Any]]:
    _, role, _ = member_rbac(c, ordinals)
    return role["rules"]


def test_member_role_names_every_lease_and_pod_it_may_touch() -> None:
    """Each member's heartbeat Lease, the membership and backup Leases whichever member leads writes, the
    restore Lease whichever member restores first claims, Events."""
    lease_rule, list_rule, events_rule, pod_rule, workload_rule, cluster_rule = rules(cluster())
    names = [f"demo-{o}" for o in range(contract.NAMED_ORDINALS)]
    assert lease_rule == {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                          "resourceNames": [f"{n}-member" for n in names] + ["demo-membership", "demo-backup", "demo-restore"],
                          "verbs": ["get", "create", "update", "patch", "delete"]}
    assert list_rule == {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]}
    assert pod_rule == {"apiGroups": [""], "resources": ["pods"], "resourceNames": names, "verbs": ["get", "patch"]}
    assert workload_rule["resourceNames"] == ["demo"] and workload_rule["verbs"] == ["get"]
    # spec.backup / spec.bootstrap are read there, and nothing more: a member that could patch its
    # cluster object could change the spec of every member (the operator takes backup-now off it).
    assert cluster_rule == {"apiGroups": [contract.GROUP], "resources": [contract.PLURAL_ETCD],
                            "resourceNames": ["demo"], "verbs": ["get"]}
    assert events_rule == {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}


def test_member_role_names_what_it_creates_and_grants_no_secrets_no_wildcards() -> None:
    for rule in rules(cluster()):
        # Events are the one unnamed create: an Event's name is not known before it is posted.
        assert "create" not in rule["verbs"] or rule.get("resourceNames") or rule["resources"] == ["events"]
        assert "*" not in rule["verbs"]
        assert not {"secrets", "*", "pods/exec", "pods/eviction"} & set(rule["resources"])


def test_no_member_rule_lets_a_pod_write_its_cluster_object() -> None:
    for rule in rules(cluster()):
        if contract.GROUP in rule["apiGroups"]:
            assert rule["verbs"] == ["get"], rule


def test_the_operator_writes_only_the_request_on_the_backup_lease() -> None:
    """Server-side apply of this body leaves the sidecar's record on the same Lease alone."""
    c = cluster()
    lease = backup_request_lease(c, "2026-11-23T07:00:00.000000Z")
    assert lease["metadata"]["name"] == contract.backup_lease_name("demo")
    assert lease["metadata"]["annotations"] == {contract.ANNOTATION_BACKUP_REQUEST: "2026-11-23T07:00:00.000000Z"}
    assert lease["metadata"]["labels"][contract.LABEL_BACKUP] == "true", "the operator's index watches it"
    assert lease["metadata"]["ownerReferences"] == [c.owner_reference] and "spec" not in lease


def test_member_role_grows_with_ordinals_beyond_the_default() -> None:
    pod_rule = rules(cluster(), 20)[3]
    assert pod_rule["resourceNames"][-1] == "demo-19"
    assert rules(cluster(), 3) == rules(cluster())  # never narrower than MEMBER_ORDINALS


# --- the provider shell, against an in-memory API ----------------------------------------------------

class MemoryAPI:
    """Objects by (apiVersion, kind, namespace, name); apply replaces, as SSA of a whole object does.
    The cluster's member pods, as listed, are `pods`."""

    def __init__(self, served: bool = True) -> None:
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.applied: list[tuple[str, str]] = []
        self.served = served
        self.pods: list[dict[str, Any]] = []

    async def list(self, api_version: str, kind: str, namespace: str | None, selector: str, *,
                   fields: str = "") -> list[dict[str, Any]]:
        assert (api_version, kind, namespace, selector) == ("v1", "Pod", "db", contract.label_selector("demo"))
        return list(self.pods)

    async def has_api(self, api_version: str, kind: str) -> bool:
        return self.served or not api_version.startswith("cert-manager.io")

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((api_version, kind, namespace, name))

    async def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        meta = manifest["metadata"]
        self.objects[(manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])] = manifest
        self.applied.append((manifest["kind"], meta["name"]))
        return manifest

    def secret(self, name: str) -> dict[str, Any]:
        return self.objects[("v1", "Secret", "db", name)]


async def test_auto_creates_a_ca_and_three_leaves_once() -> None:
    api, c = MemoryAPI(), cluster()
    state = await tls.ensure_tls(api, c, NOW)
    assert state == tls.TLSState(revision="1")
    assert sorted(api.applied) == [("Secret", "demo-ca"), ("Secret", "demo-client-tls"),
                                   ("Secret", "demo-peer-tls"), ("Secret", "demo-server-tls")]
    ca_pem = base64.b64decode(api.secret("demo-ca")["data"]["tls.crt"])
    for purpose in certificates.PURPOSES:
        secret = api.secret(f"demo-{purpose}-tls")
        assert secret["type"] == "kubernetes.io/tls"
        assert secret["metadata"]["ownerReferences"] == [c.owner_reference]
        assert secret["metadata"]["annotations"] == {contract.ANNOTATION_TLS_REVISION: "1"}
        found = certificates.read_secret(secret)
        assert found is not None and found[1] == ca_pem and certificates.signed_by(found[0].cert_pem, ca_pem)
    api.applied.clear()
    assert await tls.ensure_tls(api, c, NOW + timedelta(days=200)) == tls.TLSState(revision="1")
    assert api.applied == []  # nothing to renew: no writes


class NoSecretsAPI(MemoryAPI):
    """The apiserver's answer where the operator's secrets ClusterRole is not bound."""

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind == "Secret":
            raise ApiException(status=403, reason="Forbidden")
        return await super().get(api_version, kind, namespace, name)


async def test_auto_without_secrets_access_is_degraded_with_the_binding_to_create() -> None:
    api, c = NoSecretsAPI(), cluster()
    live = workload_manifest(c, 3, tls_revision="4")
    state = await tls.ensure_tls(api, c, NOW, workload=live)
    assert state.revision == "4", "the pods keep the certificates they run"
    assert state.problem is not None and state.problem[0] == "SecretsForbidden"
    assert f"kubectl create rolebinding {tls.SECRETS_ROLE} -n db" in state.problem[1]
    assert api.objects == {}


class NoCertificatesAPI(MemoryAPI):
    async def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        raise ApiException(status=403, reason="Forbidden")


async def test_a_refusal_outside_the_auto_providers_secrets_is_not_called_a_secrets_problem() -> None:
    with pytest.raises(ApiException):  # reconcile reports it as ApplyFailed with the apiserver's words
        await tls.ensure_tls(NoCertificatesAPI(), cluster(tls={"provider": "cert-manager"}), NOW)


async def test_auto_renews_before_expiry_with_the_same_ca_and_a_new_revision() -> None:
    api, c = MemoryAPI(), cluster()
    await tls.ensure_tls(api, c, NOW)
    ca_before = api.secret("demo-ca")["data"]
    state = await tls.ensure_tls(api, c, NOW + timedelta(days=340))
    assert state.revision == "2"
    assert api.secret("demo-ca")["data"] == ca_before
    renewed = certificates.read_secret(api.secret("demo-peer-tls"))
    assert renewed is not None
    assert certificates.not_after(renewed[0].cert_pem) > NOW + timedelta(days=700)


async def test_auto_ticks_without_write_touch_nothing() -> None:
    api = MemoryAPI()
    assert await tls.ensure_tls(api, cluster(), NOW, write=False) == tls.TLSState()
    assert api.objects == {}


async def test_cert_manager_missing_is_a_problem_on_every_tick_and_keeps_the_running_revision() -> None:
    api, c = MemoryAPI(served=False), cluster(tls={"provider": "cert-manager"})
    live = workload_manifest(c, 3, tls_revision="2.1.1")
    for write in (True, False):
        state = await tls.ensure_tls(api, c, NOW, workload=live, write=write)
        assert state.problem is not None and state.problem[0] == "CertManagerMissing"
        assert "install cert-manager" in state.problem[1]
        assert state.revision == "2.1.1"
    assert api.objects == {}


async def test_cert_manager_applies_issuers_and_certificates() -> None:
    api, c = MemoryAPI(), cluster(tls={"provider": "cert-manager"})
    state = await tls.ensure_tls(api, c, NOW)
    assert state == tls.TLSState(revision="1.1.1")
    assert api.applied == [(o["kind"], o["metadata"]["name"]) for o in certmanager.objects(c)]
    api.apply = _keep_status(api)  # type: ignore[method-assign]
    # cert-manager renewed the peer certificate: the pods must roll onto it.
    api.objects[("cert-manager.io/v1", "Certificate", "db", "demo-peer-tls")]["status"] = {"revision": 2}
    assert (await tls.ensure_tls(api, c, NOW)).revision == "1.2.1"


def _keep_status(api: MemoryAPI) -> Any:
    """SSA of a spec leaves the status cert-manager wrote."""
    plain = MemoryAPI.apply

    async def apply(manifest: dict[str, Any]) -> dict[str, Any]:
        meta = manifest["metadata"]
        old = api.objects.get((manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])) or {}
        result = await plain(api, {**manifest, **({"status": old["status"]} if "status" in old else {})})
        return result
    return apply


async def test_disabled_writes_nothing() -> None:
    api = MemoryAPI()
    state = await tls.ensure_tls(api, cluster(tls={"provider": "disabled"}), NOW)
    assert state.revision is None and state.problem is None
    assert api.objects == {}


# --- has a TLS revision rolled? the workload's counts and the pods read at that moment ----------------

def rolled_workload(c: spec.Cluster, revision: str, replicas: int = 3) -> dict[str, Any]:
    """The live workload on TLS `revision` whose status counts every pod updated and ready."""
    live = workload_manifest(c, replicas, tls_revision=revision)
    live["metadata"]["generation"] = 7
    live["status"] = {"observedGeneration": 7, "replicas": replicas, "updatedReplicas": replicas,
                      "readyReplicas": replicas}
    return live


def member_pod(ordinal: int, revision: str, *, ready: bool = True, terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"demo-{ordinal}", "uid": f"uid-{ordinal}",
                            "annotations": {contract.ANNOTATION_TLS_REVISION: revision}}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    return {"metadata": meta, "status": {"phase": "Running",
                                         "conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_rolled_when_the_counts_and_every_kept_pod_say_so() -> None:
    c = cluster()
    assert tls.rolled(c, rolled_workload(c, "3"), "3", [member_pod(o, "3") for o in range(3)])
    assert tls.rolled(c, None, "3", []), "no workload yet: nothing to roll"


@pytest.mark.parametrize("pods", [
    [member_pod(0, "3"), member_pod(1, "3")],  # demo-2 deleted, not yet re-created
    [member_pod(0, "3"), member_pod(1, "3"), member_pod(2, "3", terminating=True)],
    [member_pod(0, "3"), member_pod(1, "3"), member_pod(2, "2")],  # the previous revision
    [member_pod(0, "3"), member_pod(1, "3"), member_pod(2, "3", ready=False)],
    [member_pod(0, "3"), member_pod(1, "3"), {**member_pod(2, "3"), "metadata": {"name": "demo-2"}}],
    [member_pod(0, "3"), member_pod(1, "3"), {**member_pod(2, "3"), "metadata": {"name": "demo-canary",
                                                                                "annotations": {contract.ANNOTATION_TLS_REVISION: "3"}}}],
], ids=["missing", "terminating", "old-revision", "not-ready", "no-annotation", "stray-not-a-member"])
def test_counts_that_trail_the_pods_do_not_make_a_roll_done(pods: list[dict[str, Any]]) -> None:
    """The workload controller writes its counts after it saw a pod go; a round woken by our own
    deletion reads the counts from before it (CI: CA rotation phase 4 began while demo-2 of phase 3 was gone)."""
    c = cluster()
    assert not tls.rolled(c, rolled_workload(c, "3"), "3", pods)


def test_the_counts_still_count_when_every_pod_looks_rolled() -> None:
    c = cluster()
    pods = [member_pod(o, "3") for o in range(3)]
    behind = rolled_workload(c, "3")
    behind["status"]["updatedReplicas"] = 2
    assert not tls.rolled(c, behind, "3", pods)
    assert not tls.rolled(c, rolled_workload(c, "2"), "3", pods), "the template is not on the revision yet"


def test_only_the_ordinals_the_workload_keeps_must_show_a_pod() -> None:
    c = cluster(workload_kind="AdvancedStatefulSet")
    live = rolled_workload(c, "3", replicas=2)
    live["spec"]["reserveOrdinals"] = [1]  # keeps 0 and 2
    assert tls.rolled(c, live, "3", [member_pod(0, "3"), member_pod(2, "3"), member_pod(1, "2", terminating=True)])
    assert not tls.rolled(c, live, "3", [member_pod(0, "3"), member_pod(1, "3")])


async def test_the_next_rotation_phase_waits_for_a_pod_the_counts_still_count() -> None:
    """End to end through the provider: phase 3 (leaves) rolled per the counts, demo-2 still terminating."""
    api, c = MemoryAPI(), cluster()
    await tls.ensure_tls(api, c, NOW)  # revision 1
    del api.objects[("v1", "Secret", "db", "demo-ca")]
    assert (await tls.ensure_tls(api, c, NOW, workload=rolled_workload(c, "1"))).revision == "2"  # trust both
    api.pods = [member_pod(0, "2"), member_pod(1, "2"), member_pod(2, "2", terminating=True)]
    waiting = await tls.ensure_tls(api, c, NOW, workload=rolled_workload(c, "2"))
    assert waiting.revision == "2", "the leaves wait for demo-2 to run revision 2 again"
    api.pods[2] = member_pod(2, "2")
    assert (await tls.ensure_tls(api, c, NOW, workload=rolled_workload(c, "2"))).revision == "3"


def test_every_provider_the_crd_allows_has_one_description() -> None:
    from raftset import fields

    assert set(tls.PROVIDERS) == set(fields.TLS_PROVIDERS)
    assert tls.PROVIDERS["disabled"].ensure is None
    needs = {name: p.requires for name, p in tls.PROVIDERS.items() if p.requires}
    assert needs == {"cert-manager": (certmanager.API_VERSION, "Certificate")}
    assert all(p.missing for p in tls.PROVIDERS.values() if p.requires)
