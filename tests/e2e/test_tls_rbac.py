"""TLS providers, volume expansion and least privilege on the real control plane.

The operator runs as its own ServiceAccount with only the shipped ClusterRole (the
kruise overlay's), so every test here also proves that role is enough. The sidecar's
rights are checked with real requests made with a token of the member ServiceAccount.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from raftset import contract
from raftset.contract import SidecarEnv
from raftset.engines import TLSFiles
from raftset.sidecar.io.etcdclient import ClientTLS, EtcdClientError, MemberClient
from raftset.operator.pure import certificates
from raftset.operator.pure.storage import ANNOTATION_FAILED
from tests.e2e.test_fullstack import ELECTIONS_COUNTED, HAND_OFF_DEADLINE_S, stack
from tests.e2e.test_repair import create_repairable, replaced_automatically
from tests.harness.checker import Writer, check
from tests.harness.engines import EngineUnderTest
from tests.harness.podwatch import PodWatch, deletions
from tests.harness.operator import Operator, Sidecars, api, delete_run_namespace, heartbeat_lease, kubectl, wait_for
from tools.devcluster.plane import start_cert_manager
from tools.devcluster.podrunner import RUN_NAMESPACE_PREFIX, PodRunner

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 90
OPERATOR_NS, OPERATOR_SA = "raftset-system", "raftset-operator"
SECRETS_ROLE = "raftset-operator-secrets"
KINDS = {contract.KIND_ETCD: contract.PLURAL_ETCD, contract.KIND_XLINE: contract.PLURAL_XLINE}

# --- fixtures ----------------------------------------------------------------------------------

def _operator_rbac() -> str:
    """The kruise overlay's Namespace, ServiceAccount, ClusterRole and binding, as shipped."""
    rendered = subprocess.run(["kubectl", "kustomize", str(ROOT / "kustomize/overlays/kruise")],
                              capture_output=True, text=True, check=True, timeout=60).stdout
    keep = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    return yaml.safe_dump_all([d for d in yaml.safe_load_all(rendered) if d and d["kind"] in keep])


@pytest.fixture(scope="module")
def admin(control_plane: Any) -> str:
    return str(control_plane.kubeconfig)


@pytest.fixture(scope="module")
def operator(control_plane: Any, admin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    kubectl(admin, "apply", "--server-side", "-k", str(ROOT / "crds"))
    for plural in KINDS.values():
        kubectl(admin, "wait", "--for=condition=Established", f"crd/{plural}.{contract.GROUP}", "--timeout=60s")
    kubectl(admin, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=_operator_rbac())
    identity = control_plane.token_kubeconfig(OPERATOR_NS, OPERATOR_SA,
                                              tmp_path_factory.mktemp("sa") / "operator.kubeconfig")
    op = Operator(str(identity), tmp_path_factory.mktemp("tls-operator") / "operator.log")
    op.start()
    yield op
    op.stop()


def bind_secrets_role(admin: str, namespace: str) -> None:
    """What docs/security.md asks of the admin for each namespace that uses provider auto."""
    kubectl(admin, "create", "rolebinding", SECRETS_ROLE, "-n", namespace, f"--clusterrole={SECRETS_ROLE}",
            f"--serviceaccount={OPERATOR_NS}:{OPERATOR_SA}")


@pytest.fixture
def bare_namespace(admin: str) -> Iterator[str]:
    """A namespace where the operator may not touch Secrets."""
    name = f"s-{uuid.uuid4().hex[:8]}"
    kubectl(admin, "create", "namespace", name)
    yield name
    delete_run_namespace(admin, name)


@pytest.fixture
def namespace(admin: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """Bound for Secrets; named so that kwok leaves its pods' readiness to the runner's probes where
    the `runner` runs them (tests/e2e/conftest.py)."""
    prefix = RUN_NAMESPACE_PREFIX if "runner" in request.fixturenames else "s-"
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    kubectl(admin, "create", "namespace", name)
    bind_secrets_role(admin, name)
    yield name
    delete_run_namespace(admin, name)


def create(admin: str, kind: str, name: str, namespace: str, **spec: Any) -> None:
    body = {"apiVersion": contract.API_VERSION, "kind": kind, "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 3, "workloadKind": "StatefulSet", "storage": {"ephemeral": True}, **spec}}
    kubectl(admin, "apply", "-f", "-", stdin=yaml.safe_dump(body))


def cluster_object(admin: str, kind: str, name: str, namespace: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api(admin)).get_namespaced_custom_object(
        contract.GROUP, contract.VERSION, namespace, KINDS[kind], name)


def degraded(obj: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == "Degraded"), {})


def wait_degraded(admin: str, kind: str, name: str, namespace: str, reason: str) -> dict[str, Any]:
    """The cluster object once its Degraded condition carries `reason`."""
    return wait_for(lambda: (o := cluster_object(admin, kind, name, namespace)) and degraded(o).get("reason") == reason
                    and o, TIMEOUT, f"Degraded={reason}")


def secret(admin: str, namespace: str, name: str) -> dict[str, bytes] | None:
    try:
        found = client.CoreV1Api(api(admin)).read_namespaced_secret(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return {k: base64.b64decode(v) for k, v in (found.data or {}).items()}


def statefulset(admin: str, namespace: str, name: str) -> dict[str, Any]:
    return api(admin).sanitize_for_serialization(client.AppsV1Api(api(admin)).read_namespaced_stateful_set(name, namespace))


def template_annotation(admin: str, namespace: str, name: str) -> str | None:
    return (statefulset(admin, namespace, name)["spec"]["template"]["metadata"].get("annotations") or {}).get(
        contract.ANNOTATION_TLS_REVISION)


def assert_mounts_the_three_secrets(sts: dict[str, Any], name: str) -> None:
    pod = sts["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    files = {f"{contract.TLS_MOUNT}/{item['path']}": (src["secret"]["name"], item["key"])
             for src in volume["projected"]["sources"] for item in src["secret"]["items"]}
    tls = TLSFiles.under()
    assert files[tls.ca] == (f"{name}-server-tls", "ca.crt")
    assert files[tls.peer_cert] == (f"{name}-peer-tls", "tls.crt")
    assert files[tls.client_key] == (f"{name}-client-tls", "tls.key")
    assert len(files) == 7
    for container in (*pod["initContainers"], *pod["containers"]):
        assert {"name": "tls", "mountPath": contract.TLS_MOUNT, "readOnly": True} in container["volumeMounts"]
    env = {e["name"]: e.get("value") for e in pod["initContainers"][0]["env"]}
    assert env[SidecarEnv.TLS_DIR] == contract.TLS_MOUNT
    assert env[SidecarEnv.PEER_URL_TEMPLATE].startswith("https://")


# --- auto ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", list(KINDS))
def test_auto_issues_a_ca_and_three_leaves_and_mounts_them(admin: str, operator: Operator, namespace: str,
                                                           kind: str) -> None:
    create(admin, kind, "kv", namespace, tls={"provider": "auto"})
    names = ["kv-ca", *(certificates.secret_name("kv", p) for p in certificates.PURPOSES)]
    found = wait_for(lambda: all(secret(admin, namespace, n) for n in names) and
                     {n: secret(admin, namespace, n) for n in names}, TIMEOUT, "the auto provider's Secrets")
    ca = x509.load_pem_x509_certificate(found["kv-ca"]["tls.crt"])
    now = datetime.now(timezone.utc)
    for purpose in certificates.PURPOSES:
        data = found[f"kv-{purpose}-tls"]
        assert set(data) == {"tls.crt", "tls.key", "ca.crt"}
        assert data["ca.crt"] == found["kv-ca"]["tls.crt"]
        assert certificates.signed_by(data["tls.crt"], found["kv-ca"]["tls.crt"])
        assert certificates.matches_key(certificates.KeyPair(data["tls.crt"], data["tls.key"]))
    # A peer dialling kv-2 and a client dialling the client Service both verify the chain.
    for purpose, name in (("server", "kv-client.%s.svc" % namespace), ("peer", f"kv-2.kv-peer.{namespace}.svc")):
        leaf = x509.load_pem_x509_certificate(found[f"kv-{purpose}-tls"]["tls.crt"])
        PolicyBuilder().store(Store([ca])).time(now).build_server_verifier(x509.DNSName(name)).verify(leaf, [])

    sts = wait_for(lambda: statefulset(admin, namespace, "kv"), TIMEOUT, "the StatefulSet")
    assert_mounts_the_three_secrets(sts, "kv")
    assert template_annotation(admin, namespace, "kv") == "1"
    core = client.CoreV1Api(api(admin))
    owners = core.read_namespaced_secret("kv-peer-tls", namespace).metadata.owner_references
    assert [(o.kind, o.name) for o in owners] == [(kind, "kv")]


def test_auto_reissues_a_deleted_leaf_from_the_same_ca_without_a_roll(admin: str, operator: Operator,
                                                                        namespace: str) -> None:
    create(admin, contract.KIND_ETCD, "kv", namespace, tls={"provider": "auto"})
    first = wait_for(lambda: secret(admin, namespace, "kv-client-tls"), TIMEOUT, "the client Secret")
    ca = secret(admin, namespace, "kv-ca")
    assert ca is not None
    client.CoreV1Api(api(admin)).delete_namespaced_secret("kv-client-tls", namespace)
    again = wait_for(lambda: secret(admin, namespace, "kv-client-tls"), TIMEOUT, "the client Secret re-issued")
    assert again["tls.crt"] != first["tls.crt"]
    assert certificates.signed_by(again["tls.crt"], ca["tls.crt"])
    assert template_annotation(admin, namespace, "kv") == "1"


def test_auto_rotates_a_deleted_ca_in_three_rolls_each_one_member_at_a_time_leader_last(
        admin: str, operator: Operator, namespace: str) -> None:
    """Phase by phase (rotation.py): trust both CAs, re-issue the leaves, drop the old CA; each
    phase a roll of one pod at a time with the leader last, the next only once it finished."""
    # 2 s, a 6 s Lease: the stand-in ticks every member's sidecar in turn in one thread, several API
    # round trips a tick, and under the CI's load one tick took 3.9 s, past the 3 s Lease of a 1 s
    # heartbeat (real sidecars write each their own Lease); the rolls settle a heartbeat interval each.
    create(admin, contract.KIND_ETCD, "kv", namespace, tls={"provider": "auto"},
           sidecar={"heartbeatIntervalSeconds": 2})
    core = client.CoreV1Api(api(admin))
    members = ["kv-0", "kv-1", "kv-2"]

    with Sidecars(api(admin), namespace, "kv", leader=1, interval=0.3) as sidecars:
        # The leader asked for, before the rotation starts: each phase's last restart is the leader's.
        wait_for(lambda: sidecars.leader == 1 and template_annotation(admin, namespace, "kv") == "1"
                 and sorted(p.metadata.name for p in core.list_namespaced_pod(
                     namespace, label_selector=f"{contract.LABEL_INSTANCE}=kv").items) == members,
                 TIMEOUT, "three pods on TLS revision 1, kv-1 leading")
        old_ca = secret(admin, namespace, "kv-ca")["tls.crt"]
        with PodWatch(core, namespace, "kv", lambda: sidecars.leader) as pods:
            core.delete_namespaced_secret("kv-ca", namespace)
            wait_for(lambda: all(c.tls == "4" and c.ready for c in pods.current().values())
                     and sorted(pods.current()) == members, 4 * TIMEOUT, "every pod Ready on TLS revision 4")
    assert pods.errors == []

    incarnations: dict[str, list[tuple[str, str]]] = {}
    for change in pods.changes:
        seen = incarnations.setdefault(change.name, [])
        if not seen or seen[-1][0] != change.uid:
            seen.append((change.uid, change.tls))
    # Every member restarted once per phase, each time on the next revision: none skipped a phase.
    assert {name: [tls for _, tls in seen] for name, seen in incarnations.items()} == \
        {name: ["1", "2", "3", "4"] for name in members}, incarnations
    for phase in ("2", "3", "4"):
        before = str(int(phase) - 1)
        steps = [(change, state) for change, state in deletions(pods.changes) if change.tls == before]
        assert sorted(change.name for change, _ in steps) == members, (phase, steps)
        # The next phase began only once the previous one had rolled: every pod Ready on its revision.
        first, state = steps[0]
        assert all(state[name].tls == before and state[name].ready for name in members), (phase, state)
        # One member at a time: each restart found every other pod up.
        for change, state in steps:
            assert all(state[name].up for name in members), (phase, change, state)
        leader = first.leader  # stable within a phase: leadership moves only with the leader's pod
        assert steps[-1][0].name == f"kv-{leader}", f"phase {phase}: the leader kv-{leader} last ({steps})"
    new_ca = secret(admin, namespace, "kv-ca")["tls.crt"]
    assert new_ca != old_ca
    for purpose in certificates.PURPOSES:
        data = secret(admin, namespace, f"kv-{purpose}-tls")
        assert data["ca.crt"] == new_ca and certificates.signed_by(data["tls.crt"], new_ca)


def client_tls(admin: str, namespace: str, cluster: str) -> ClientTLS:
    """The client material as a client outside the cluster reads it from `<cluster>-client-tls`."""
    data = secret(admin, namespace, certificates.secret_name(cluster, certificates.CLIENT))
    assert data is not None
    return ClientTLS(ca=data["ca.crt"], cert=data["tls.crt"], key=data["tls.key"])


def refusal(url: str, tls: ClientTLS) -> str | None:
    """Why the member at `url` does not answer Status to a client with `tls` (its CA verifies the server,
    its certificate is verified by the member); None when it answers."""
    async def ask() -> str | None:
        try:
            async with MemberClient(url, tls, timeout=5) as member:
                await member.status()
        except EtcdClientError as exc:
            return str(exc)
        return None
    return asyncio.run(ask())


ROTATION_TIMEOUT = 900  # three rolls of three real members, each restart joining and probed ready


def test_a_deleted_ca_rotates_through_real_members_leader_last_and_fails_no_write(
        admin: str, operator: Operator, namespace: str, runner: PodRunner, etcd: EngineUnderTest) -> None:
    """The operator rolls the three phases of a CA rotation through real members (sidecars and etcd run by the
    stand-in kubelet): one member at a time, the leader of the moment last, each phase only once the last one
    rolled. A writer that re-reads the client Secret when it changes (as docs/security.md asks of clients)
    writes throughout and fails nothing; every member keeps its id, and ends serving the new CA alone."""
    kv = stack(admin, namespace, "kv", runner, "https")
    # A restart keeps its data on a claim; a 5 s election timeout leaves only the elections the roll causes.
    kv.create(3, workloadKind="StatefulSet", version=etcd.version, storage={"size": "1Gi"},
              tls={"provider": "auto"}, **ELECTIONS_COUNTED)
    wait_for(lambda: secret(admin, namespace, "kv-ca") and secret(admin, namespace, "kv-client-tls"), TIMEOUT,
             "the CA and the client Secret")
    old_ca = secret(admin, namespace, "kv-ca")["tls.crt"]
    original = kv.tls = client_tls(admin, namespace, "kv")
    kv.wait_healthy(0, 1, 2)
    ids = {m.name: m.id for m in kv.members(0, 1, 2)}
    urls = [kv.url(o) for o in (0, 1, 2)]
    assert template_annotation(admin, namespace, "kv") == "1"
    core = client.CoreV1Api(api(admin))

    def uids() -> dict[str, str]:
        pods = core.list_namespaced_pod(namespace, label_selector=f"{contract.LABEL_INSTANCE}=kv").items
        return {p.metadata.name: p.metadata.uid for p in pods if p.metadata.deletion_timestamp is None}

    def ready() -> set[str]:
        """Pods whose store's readinessProbe passes (the runner probes as kubelet does)."""
        pods = core.list_namespaced_pod(namespace, label_selector=f"{contract.LABEL_INSTANCE}=kv").items
        return {p.metadata.name for p in pods if p.metadata.deletion_timestamp is None
                and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])}

    writer = Writer(urls, kv.tls, deadline=HAND_OFF_DEADLINE_S, lifetime=ROTATION_TIMEOUT + 120)
    writer.start()
    try:
        wait_for(lambda: writer.ok > 20, 30, "the writer running")
        core.delete_namespaced_secret("kv-ca", namespace)
        # The timeline: which pods were re-created under which revision, who led (Raft's own answer) when
        # each revision appeared, and each client Secret the writer followed.
        restarts: dict[str, list[str]] = {}
        switched: dict[str, tuple[dict[str, str], int | None]] = {}  # revision -> (pods' uids, leader) then
        followed = 0
        seen, revision = uids(), "1"
        deadline = time.monotonic() + ROTATION_TIMEOUT
        while revision != "4" or len(restarts.get("4", [])) < 3:
            assert time.monotonic() < deadline, f"rotation stuck at revision {revision}: {restarts}"
            tls = client_tls(admin, namespace, "kv")
            if tls != kv.tls:
                kv.tls = tls
                writer.follow(tls)
                followed += 1
            now_rev, now_uids = template_annotation(admin, namespace, "kv") or revision, uids()
            if now_rev != revision:
                switched[now_rev], revision = (dict(now_uids), kv.leader(0, 1, 2)), now_rev
            restarts.setdefault(revision, []).extend(
                name for name, uid in sorted(now_uids.items()) if seen.get(name) not in (None, uid))
            seen.update(now_uids)
            time.sleep(0.2)
        # The last restart seen is a new pod object: wait for its member to serve.
        wait_for(lambda: ready() == {"kv-0", "kv-1", "kv-2"}, TIMEOUT, "every re-created pod Ready")
        kv.wait_healthy(0, 1, 2)
        written = writer.ok
        wait_for(lambda: writer.ok > written + 20, 30, "writes flowing on the new CA")
    finally:
        writer.stop()
    print(f"rotation: restarts {restarts}; leaders {({r: l for r, (_, l) in switched.items()})}; "
          f"client Secret followed {followed}x; writer {writer.ok} ok, {writer.failed} failed, "
          f"{len(writer.errors)} attempts refused (last: {writer.errors[-3:]}), longest stall {writer.longest_stall:.2f}s")
    assert list(switched) == ["2", "3", "4"], switched
    for phase in ("2", "3", "4"):
        assert sorted(restarts[phase]) == ["kv-0", "kv-1", "kv-2"], (phase, restarts)
        leader = switched[phase][1]
        assert leader is not None and restarts[phase][-1] == f"kv-{leader}", \
            f"phase {phase}: the leader (kv-{leader}) last ({restarts})"
    for phase, before in (("3", "2"), ("4", "3")):
        # The next phase began only after every pod of the previous one was re-created.
        assert all(switched[phase][0][n] != switched[before][0][n] for n in switched[phase][0]), (phase, switched)
    assert followed >= 3, "the client Secret changed in each phase"  # bundle, new leaf, new CA alone
    assert writer.failed == 0, f"{writer.failed} writes failed: {writer.errors[-3:]}"
    assert writer.ok > 100, writer.ok
    assert {m.name: m.id for m in kv.members(0, 1, 2)} == ids, "a restart keeps every member"

    new_ca = secret(admin, namespace, "kv-ca")["tls.crt"]
    assert new_ca != old_ca
    for purpose in certificates.PURPOSES:
        data = secret(admin, namespace, f"kv-{purpose}-tls")
        assert data["ca.crt"] == new_ca and certificates.signed_by(data["tls.crt"], new_ca)
    only_new = client_tls(admin, namespace, "kv")
    assert only_new.ca == new_ca
    # Every member serves a certificate of the new CA and refuses a client certificate of the old one.
    # Every member serves a certificate of the new CA to a client that trusts it alone, and refuses the old
    # CA's client certificate; a client that trusts only the old CA no longer reaches any.
    old_cert = ClientTLS(ca=new_ca, cert=original.cert, key=original.key)
    for url in urls:
        assert refusal(url, only_new) is None, f"{url}: a client with only the new CA: {refusal(url, only_new)}"
        assert refusal(url, old_cert), f"{url}: the old CA's client certificate is still accepted"
        assert refusal(url, original), f"{url}: still serves a certificate of the old CA"
    asyncio.run(check(urls, writer.acked, only_new))

def test_disabled_speaks_http_and_warns(admin: str, operator: Operator, namespace: str) -> None:
    create(admin, contract.KIND_XLINE, "plain", namespace, tls={"provider": "disabled"})
    sts = wait_for(lambda: statefulset(admin, namespace, "plain"), TIMEOUT, "the StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    assert all(v["name"] != "tls" for v in pod["volumes"])
    env = {e["name"]: e.get("value") for e in pod["initContainers"][0]["env"]}
    assert env[SidecarEnv.PEER_URL_TEMPLATE].startswith("http://") and not env[SidecarEnv.TLS_DIR]

    def warnings() -> list[Any]:
        events = client.CoreV1Api(api(admin)).list_namespaced_event(
            namespace, field_selector="involvedObject.name=plain").items
        return [e for e in events if e.reason == "TLSDisabled" and e.type == "Warning" and "plain HTTP" in e.message]
    def encrypted() -> dict[str, Any] | None:
        found = cluster_object(admin, contract.KIND_XLINE, "plain", namespace).get("status") or {}
        return next((c for c in found.get("conditions") or [] if c["type"] == "Encrypted"), None)
    condition = wait_for(encrypted, TIMEOUT, "the Encrypted condition")
    assert (condition["status"], condition["reason"]) == ("False", "TLSDisabled") and "plain HTTP" in condition["message"]
    wait_for(warnings, TIMEOUT, "a TLSDisabled warning Event")
    assert secret(admin, namespace, "plain-server-tls") is None

    # A spec change is reconciled (observedGeneration follows) without a second warning.
    kubectl(admin, "-n", namespace, "patch", "xlinecluster", "plain", "--type=merge",
            "-p", json.dumps({"spec": {"podTemplate": {"annotations": {"touched": "yes"}}}}))
    generation = cluster_object(admin, contract.KIND_XLINE, "plain", namespace)["metadata"]["generation"]
    wait_for(lambda: cluster_object(admin, contract.KIND_XLINE, "plain", namespace)["status"]
             .get("observedGeneration") == generation, TIMEOUT, "the spec change reconciled")
    assert sum((e.count or 1) for e in warnings()) == 1


# --- cert-manager ------------------------------------------------------------------------------------
# The first test runs before cert-manager's CRDs exist; the fixture below installs its real CRDs
# and starts its real controller (tools.devcluster.plane.start_cert_manager).

def test_cert_manager_missing_is_degraded(admin: str, operator: Operator, namespace: str) -> None:
    served = kubectl(admin, "get", "crd", "certificates.cert-manager.io", check=False)
    if served.returncode == 0:
        pytest.fail("cert-manager's CRDs are already installed: this test must run first in the module")
    create(admin, contract.KIND_ETCD, "kv", namespace, tls={"provider": "cert-manager"})
    obj = wait_degraded(admin, contract.KIND_ETCD, "kv", namespace, "CertManagerMissing")
    assert "install cert-manager" in degraded(obj)["message"]


@pytest.fixture(scope="module")
def cert_manager(control_plane: Any) -> None:
    """The real cert-manager controller with its real CRDs (after the test above)."""
    start_cert_manager(control_plane)


def certificate(admin: str, namespace: str, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api(admin)).get_namespaced_custom_object(
        "cert-manager.io", "v1", namespace, "certificates", name)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def all_ready(admin: str, namespace: str, names: list[str]) -> bool:
    return all(condition(certificate(admin, namespace, n), "Ready").get("status") == "True" for n in names)


def renew(admin: str, namespace: str, name: str) -> None:
    """What `cmctl renew` does: mark the Certificate Issuing, reason ManuallyTriggered."""
    cert = certificate(admin, namespace, name)
    conditions = [c for c in (cert.get("status") or {}).get("conditions") or [] if c["type"] != "Issuing"]
    conditions.append({"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
                       "message": "renewal requested by the test",
                       "lastTransitionTime": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})
    kubectl(admin, "patch", "certificates.cert-manager.io", name, "-n", namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": {"conditions": conditions}}))


def test_cert_manager_issues_the_clusters_certificates_through_the_operators_ca_chain(
        admin: str, operator: Operator, namespace: str, cert_manager: None) -> None:
    create(admin, contract.KIND_ETCD, "kv", namespace, tls={"provider": "cert-manager"})
    custom = client.CustomObjectsApi(api(admin))
    names = [certificates.secret_name("kv", p) for p in certificates.PURPOSES]
    # The real controller issues them all: the self-signed CA first, then the leaves from it.
    wait_for(lambda: all_ready(admin, namespace, ["kv-ca", *names]), TIMEOUT, "cert-manager's Certificates Ready")
    issuers = {i["metadata"]["name"]: i for i in
               custom.list_namespaced_custom_object("cert-manager.io", "v1", namespace, "issuers")["items"]}
    assert {n: i["spec"] for n, i in issuers.items()} == {"kv-selfsigned": {"selfSigned": {}},
                                                         "kv-ca": {"ca": {"secretName": "kv-ca"}}}
    assert all(condition(i, "Ready").get("status") == "True" for i in issuers.values())
    assert certificate(admin, namespace, "kv-ca")["spec"]["isCA"] is True

    ca_pem = secret(admin, namespace, "kv-ca")["tls.crt"]
    ca = x509.load_pem_x509_certificate(ca_pem)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    expected = certificates.leaf_specs("kv", namespace, 3)
    now = datetime.now(timezone.utc)
    issued = {}
    for purpose in certificates.PURPOSES:
        data = secret(admin, namespace, f"kv-{purpose}-tls")
        assert data["ca.crt"] == ca_pem, "cert-manager's CA issuer fills ca.crt with the CA"
        assert certificates.signed_by(data["tls.crt"], ca_pem)
        assert certificates.matches_key(certificates.KeyPair(data["tls.crt"], data["tls.key"]))
        assert certificates.covers(data["tls.crt"], expected[purpose])
        issued[purpose] = data["tls.crt"]
    for purpose, name in (("server", f"kv-client.{namespace}.svc"), ("peer", f"kv-2.kv-peer.{namespace}.svc")):
        leaf = x509.load_pem_x509_certificate(issued[purpose])
        PolicyBuilder().store(Store([ca])).time(now).build_server_verifier(x509.DNSName(name)).verify(leaf, [])

    # The pods mount them; the first issue does not roll.
    sts = wait_for(lambda: statefulset(admin, namespace, "kv"), TIMEOUT, "the StatefulSet")
    assert_mounts_the_three_secrets(sts, "kv")
    wait_for(lambda: template_annotation(admin, namespace, "kv") == "1.1.1", TIMEOUT, "the TLS revision 1.1.1")

    # A renewal by cert-manager (revision 2 of the peer certificate, a new key) rolls the pods.
    renew(admin, namespace, "kv-peer-tls")
    wait_for(lambda: (certificate(admin, namespace, "kv-peer-tls").get("status") or {}).get("revision") == 2,
             TIMEOUT, "the peer Certificate re-issued")
    renewed = secret(admin, namespace, "kv-peer-tls")
    assert renewed["tls.crt"] != issued["peer"] and certificates.signed_by(renewed["tls.crt"], ca_pem)
    wait_for(lambda: template_annotation(admin, namespace, "kv") == "1.2.1", TIMEOUT, "the TLS revision 1.2.1")
    # No sidecars run here, so no leader: Degraded may say so, but not that TLS or a write failed.
    assert degraded(cluster_object(admin, contract.KIND_ETCD, "kv", namespace)).get("reason") not in (
        "CertManagerMissing", "ApplyFailed")


def test_cert_manager_issues_through_the_users_cluster_issuer(admin: str, operator: Operator, namespace: str,
                                                             cert_manager: None) -> None:
    issuer = f"corp-{namespace}"
    kubectl(admin, "apply", "-f", "-", stdin=yaml.safe_dump({
        "apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer", "metadata": {"name": issuer},
        "spec": {"selfSigned": {}}}))
    try:
        create(admin, contract.KIND_XLINE, "kv", namespace,
               tls={"provider": "cert-manager", "issuerRef": {"name": issuer, "kind": "ClusterIssuer"}})
        names = [certificates.secret_name("kv", p) for p in certificates.PURPOSES]
        wait_for(lambda: all_ready(admin, namespace, names), TIMEOUT, "the Certificates Ready")
        for purpose in certificates.PURPOSES:
            assert certificate(admin, namespace, f"kv-{purpose}-tls")["spec"]["issuerRef"] == {
                "name": issuer, "kind": "ClusterIssuer", "group": "cert-manager.io"}
            assert secret(admin, namespace, f"kv-{purpose}-tls")["tls.crt"]
        issuers = client.CustomObjectsApi(api(admin)).list_namespaced_custom_object(
            "cert-manager.io", "v1", namespace, "issuers")["items"]
        assert issuers == []
    finally:
        kubectl(admin, "delete", "clusterissuer", issuer, "--wait=false", check=False)


def test_a_corrupt_member_is_replaced_while_every_member_serves_cert_managers_certificates(
        admin: str, operator: Operator, namespace: str, cert_manager: None, runner: PodRunner,
        etcd: EngineUnderTest) -> None:
    """Real members under the real cert-manager: the Secrets it issues are what the members serve and peer with
    (the stand-in kubelet adds the pod's loopback address to the server and peer leaves with the same CA's key,
    as the pods' DNS names do not resolve here). A follower's db is garbled; its replacement joins over TLS."""
    kv = stack(admin, namespace, "kv", runner, "https")
    create_repairable(kv, "StatefulSet", etcd, "Automatic", tls={"provider": "cert-manager"})
    names = [certificates.secret_name("kv", p) for p in certificates.PURPOSES]
    wait_for(lambda: all_ready(admin, namespace, ["kv-ca", *names]), TIMEOUT, "cert-manager's Certificates Ready")
    ca_pem = secret(admin, namespace, "kv-ca")["tls.crt"]
    issued = secret(admin, namespace, certificates.secret_name("kv", certificates.CLIENT))
    assert issued["ca.crt"] == ca_pem and certificates.signed_by(issued["tls.crt"], ca_pem)
    # Every client call of the test verifies the members' certificates against cert-manager's CA only.
    kv.tls = ClientTLS(ca=ca_pem, cert=issued["tls.crt"], key=issued["tls.key"])
    new = replaced_automatically(kv, runner, "db")
    members = {m.name: m for m in kv.members(0, 1, 2)}
    assert members["kv-2"].id == new and all(m.started and not m.is_learner for m in members.values())
    assert all(u.startswith("https://") for m in members.values() for u in (*m.peer_urls, *m.client_urls)), members
    # Nothing was issued again for the replacement: it took the pod's mounted certificates.
    assert all(certificate(admin, namespace, n)["status"].get("revision") == 1 for n in names)


# --- Secrets, namespace by namespace -------------------------------------------------------------------

def test_auto_where_the_secrets_role_is_not_bound_is_degraded_until_it_is(
        control_plane: Any, admin: str, operator: Operator, bare_namespace: str, tmp_path: Path) -> None:
    ns = bare_namespace
    create(admin, contract.KIND_ETCD, "kv", ns, tls={"provider": "auto"})
    obj = wait_degraded(admin, contract.KIND_ETCD, "kv", ns, "SecretsForbidden")
    assert f"kubectl create rolebinding {SECRETS_ROLE} -n {ns}" in degraded(obj)["message"]
    assert secret(admin, ns, "kv-ca") is None
    # The operator's own identity: no Secret anywhere it is not bound, not even a list.
    operator_api = api(str(control_plane.token_kubeconfig(OPERATOR_NS, OPERATOR_SA, tmp_path / "op.kubeconfig")))
    core = client.CoreV1Api(operator_api)
    for what, call in {
        "read a Secret in kube-system": lambda: core.read_namespaced_secret("anything", "kube-system"),
        "list Secrets cluster-wide": lambda: core.list_secret_for_all_namespaces(),
        "create a Secret here": lambda: core.create_namespaced_secret(ns, {"metadata": {"name": "x"}}),
    }.items():
        assert _status(call) == 403, what
    # The admin binds the role in this namespace: the next retry issues everything.
    bind_secrets_role(admin, ns)
    wait_for(lambda: secret(admin, ns, "kv-ca") and secret(admin, ns, "kv-server-tls"), TIMEOUT,
             "the Secrets issued once the role is bound")
    assert _status(lambda: core.list_namespaced_secret(ns)) == 403, "bound for get/create/patch, never list"


# --- storage -------------------------------------------------------------------------------------------

def test_growing_storage_patches_the_claims_and_keeps_the_template(admin: str, operator: Operator,
                                                                    namespace: str) -> None:
    core = client.CoreV1Api(api(admin))
    # The workload's claims, made ahead (the StatefulSet controller adopts them by name): no
    # provisioner binds them here, so the apiserver refuses to resize them, as it would for
    # a StorageClass without allowVolumeExpansion.
    for ordinal in range(3):
        core.create_namespaced_persistent_volume_claim(namespace, {
            "metadata": {"name": f"data-kv-{ordinal}", "labels": contract.selector_labels("kv")},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    create(admin, contract.KIND_ETCD, "kv", namespace, tls={"provider": "disabled"},
           storage={"size": "1Gi"})
    wait_for(lambda: statefulset(admin, namespace, "kv"), TIMEOUT, "the StatefulSet")
    kubectl(admin, "patch", f"{contract.PLURAL_ETCD}/kv", "-n", namespace, "--type=merge",
            "-p", json.dumps({"spec": {"storage": {"size": "2Gi"}}}))
    obj = wait_degraded(admin, contract.KIND_ETCD, "kv", namespace, "StorageExpansionFailed")
    assert "allowVolumeExpansion" in degraded(obj)["message"]
    sts = statefulset(admin, namespace, "kv")
    # The workload was still applied: its claim template kept the size it was created with.
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert sts["metadata"]["annotations"][ANNOTATION_FAILED] == "2Gi"

    kubectl(admin, "patch", f"{contract.PLURAL_ETCD}/kv", "-n", namespace, "--type=merge",
            "-p", json.dumps({"spec": {"storage": {"size": "512Mi"}}}))
    obj = wait_degraded(admin, contract.KIND_ETCD, "kv", namespace, "StorageShrinkRefused")
    assert "cannot shrink" in degraded(obj)["message"]
    assert [p.spec.resources.requests["storage"] for p in
            core.list_namespaced_persistent_volume_claim(namespace).items] == ["1Gi"] * 3


# --- the member's rights --------------------------------------------------------------------------------

def _status(call: Any) -> int:
    try:
        call()
    except ApiException as error:
        return int(error.status)
    return 200


def _apply_lease(api_client: client.ApiClient, namespace: str, body: dict[str, Any]) -> None:
    """Server-side apply, as the sidecar renews its Lease."""
    leases = DynamicClient(api_client).resources.get(api_version="coordination.k8s.io/v1", kind="Lease")
    leases.server_side_apply(body=body, name=body["metadata"]["name"], namespace=namespace,
                             field_manager="raftset-sidecar", force_conflicts=True)


def _ensure_pod(admin: str, namespace: str, name: str, cluster: str) -> client.V1Pod:
    """The member pod (kwok runs it on the full plane; made by hand where no controller does)."""
    core = client.CoreV1Api(api(admin))

    def found() -> client.V1Pod | None:
        try:
            return core.read_namespaced_pod(name, namespace)
        except ApiException as error:
            if error.status != 404:
                raise
        return None
    pod = wait_for(lambda: found() or None, 20, f"pod {name}") if _has_controllers(admin) else None
    if pod is None:
        pod = core.create_namespaced_pod(namespace, {
            "metadata": {"name": name, "labels": contract.selector_labels(cluster)},
            "spec": {"serviceAccountName": f"{cluster}-member",
                     "containers": [{"name": "c", "image": "example.invalid/none"}]}})
    return pod


def _has_controllers(admin: str) -> bool:
    return bool(client.CoreV1Api(api(admin)).list_node().items)


def test_member_role_lets_the_sidecar_work_and_refuses_everything_else(
        control_plane: Any, admin: str, operator: Operator, namespace: str, tmp_path: Path) -> None:
    create(admin, contract.KIND_ETCD, "kv", namespace, tls={"provider": "disabled"})
    create(admin, contract.KIND_ETCD, "other", namespace, tls={"provider": "disabled"})
    rbac = client.RbacAuthorizationV1Api(api(admin))
    for name in ("kv-member", "other-member"):
        wait_for(lambda n=name: rbac.read_namespaced_role_binding(n, namespace), TIMEOUT, f"RoleBinding {name}")
    wait_for(lambda: statefulset(admin, namespace, "other"), TIMEOUT, "the other StatefulSet")
    _ensure_pod(admin, namespace, "kv-0", "kv")
    _ensure_pod(admin, namespace, "other-0", "other")

    member = api(str(control_plane.token_kubeconfig(namespace, "kv-member", tmp_path / "member.kubeconfig")))
    core, apps, leases = client.CoreV1Api(member), client.AppsV1Api(member), client.CoordinationV1Api(member)
    lease = heartbeat_lease(namespace, "kv", "kv-0", role="leader", member_id="1")

    # What the sidecar does: create and renew its Lease (server-side apply), read and list
    # the cluster's Leases, delete its Lease, label its pod, read its pod and its workload.
    allowed = {
        "apply own lease (create)": lambda: _apply_lease(member, namespace, lease),
        "apply own lease (renew)": lambda: _apply_lease(member, namespace, lease),
        "get own lease": lambda: leases.read_namespaced_lease("kv-0-member", namespace),
        "list leases": lambda: leases.list_namespaced_lease(namespace),
        "label own pod": lambda: core.patch_namespaced_pod(
            "kv-0", namespace, {"metadata": {"labels": {contract.LABEL_ROLE: "leader"}}}),
        "get own pod": lambda: core.read_namespaced_pod("kv-0", namespace),
        "get own workload": lambda: apps.read_namespaced_stateful_set("kv", namespace),
        "delete own lease": lambda: leases.delete_namespaced_lease("kv-0-member", namespace),
    }
    for what, call in allowed.items():
        assert _status(call) == 200, what

    stranger = heartbeat_lease(namespace, "kv", "intruder", role="leader", member_id="1")
    refused = {
        "get secrets": lambda: core.list_namespaced_secret(namespace),
        "read a secret": lambda: core.read_namespaced_secret("kv-member-token", namespace),
        "patch own workload": lambda: apps.patch_namespaced_stateful_set("kv", namespace, {"spec": {"replicas": 9}}),
        "delete own workload": lambda: apps.delete_namespaced_stateful_set("kv", namespace),
        "delete a pod": lambda: core.delete_namespaced_pod("kv-0", namespace),
        "create a pod": lambda: core.create_namespaced_pod(namespace, {
            "metadata": {"name": "kv-9"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
        "list pods": lambda: core.list_namespaced_pod(namespace),
        "evict a pod": lambda: core.create_namespaced_pod_eviction("kv-0", namespace, {
            "metadata": {"name": "kv-0", "namespace": namespace}}),
        "get another cluster's workload": lambda: apps.read_namespaced_stateful_set("other", namespace),
        "label another cluster's pod": lambda: core.patch_namespaced_pod(
            "other-0", namespace, {"metadata": {"labels": {contract.LABEL_ROLE: "leader"}}}),
        "apply a lease of another name": lambda: _apply_lease(member, namespace, stranger),
        "create its lease with a POST (no name to check)": lambda: leases.create_namespaced_lease(
            namespace, {"metadata": {"name": "kv-1-member"}, "spec": {"holderIdentity": "kv-1"}}),
        "delete another cluster's lease": lambda: leases.delete_namespaced_lease("other-0-member", namespace),
        "read another namespace's leases": lambda: leases.list_namespaced_lease(OPERATOR_NS),
        "patch the cluster object": lambda: client.CustomObjectsApi(member).patch_namespaced_custom_object(
            contract.GROUP, contract.VERSION, namespace, contract.PLURAL_ETCD, "kv", {"spec": {"replicas": 1}}),
        "change its own Role": lambda: client.RbacAuthorizationV1Api(member).patch_namespaced_role(
            "kv-member", namespace, {"rules": []}),
    }
    for what, call in refused.items():
        assert _status(call) == 403, what
