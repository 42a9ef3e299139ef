"""The pod runner's pure parts: loopback addresses, the sidecar's environment, what it skips."""

from __future__ import annotations

import ipaddress
import random
import json
from pathlib import Path
from typing import Any

import pytest
from datetime import datetime, timezone

from raftset import contract
from raftset.operator.pure.pod_template import pod_template, tls_volume
from raftset.operator.pure import certificates
from tests.unit import builders
from tools.devcluster import kubeconfig, podrunner
from tools.devcluster.podrunner import AddressBook

pytestmark = pytest.mark.unit


def pod(name: str = "kv-2", *, env: list[dict[str, Any]] | None = None, volumes: list[dict[str, Any]] | None = None,
        grace: int | None = 60) -> dict[str, Any]:
    declared = env if env is not None else [
        {"name": "RAFTSET_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "RAFTSET_NAMESPACE", "value": "prod"},
        {"name": "RAFTSET_CLUSTER", "value": "kv"},
        {"name": "RAFTSET_ENGINE", "value": "etcd"},
        {"name": "RAFTSET_PEER_URL_TEMPLATE", "value": "http://{pod}.kv-peer.prod.svc:2380"},
        {"name": "RAFTSET_HTTP_ADDRESS", "value": "0.0.0.0:8080"},
        {"name": "RAFTSET_TLS_DIR", "value": ""},
        {"name": "RAFTSET_HEARTBEAT_INTERVAL", "value": "2"},
    ]
    spec: dict[str, Any] = {
        "initContainers": [{"name": "sidecar", "env": declared}],
        "containers": [{"name": "etcd"}],
        "volumes": volumes if volumes is not None else [{"name": "run", "emptyDir": {}}],
    }
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": name, "namespace": "prod", "uid": "u-1"}, "spec": spec}


def test_each_cluster_gets_its_own_prefix_and_keeps_it() -> None:
    book = AddressBook(first=130 * 256 + 254)
    assert book.prefix("a", "kv") == "127.130.254"
    assert book.prefix("b", "kv") == "127.130.255"  # same cluster name, other namespace
    assert book.prefix("a", "other") == "127.131.0"  # carries into the next octet
    assert book.prefix("a", "kv") == "127.130.254"  # a re-created pod finds its address again


def test_prefixes_stay_inside_loopback() -> None:
    book = AddressBook(first=254 * 256 + 255)
    assert book.prefix("a", "kv") == "127.254.255"
    with pytest.raises(ValueError, match="exhausted"):
        book.prefix("a", "next")


@pytest.mark.parametrize("seed", range(20))
def test_random_books_avoid_the_planes_and_the_etcd_tier(seed: int) -> None:
    book = podrunner.random_book(random.Random(seed))
    a = int(book.prefix("n", "c").split(".")[1])
    assert 128 <= a <= 190


@pytest.mark.parametrize("ordinal,ip", [(0, "127.9.8.10"), (4, "127.9.8.14"), (15, "127.9.8.115"), (99, "127.9.8.199")])
def test_pod_ip_is_what_the_url_template_renders(ordinal: int, ip: str) -> None:
    assert podrunner.pod_ip("127.9.8", ordinal) == ip
    env = podrunner.loopback_env({}, "127.9.8", ordinal, data_dir=Path("/d"), run_dir=Path("/r"), kubeconfig="/k")
    assert env["RAFTSET_PEER_URL_TEMPLATE"].format(ordinal=ordinal) == f"http://{ip}:2380"
    assert env["RAFTSET_CLIENT_URL_TEMPLATE"].format(ordinal=ordinal) == f"http://{ip}:2379"
    assert ipaddress.ip_address(ip) in ipaddress.ip_network("127.0.0.0/8")


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_peer_hook_moves_only_the_listening_port(scheme: str) -> None:
    """The member listens behind a forwarder (`PodRunner(peer_listen=...)`); what it advertises stays :2380."""
    assert podrunner.with_port(f"{scheme}://127.9.8.12:2380", 2382) == f"{scheme}://127.9.8.12:2382"


@pytest.mark.parametrize("ordinal", [-1, 100])
def test_ordinals_without_an_address_are_refused(ordinal: int) -> None:
    with pytest.raises(ValueError):
        podrunner.pod_ip("127.9.8", ordinal)


def test_declared_env_resolves_field_refs() -> None:
    env = podrunner.declared_env(pod("kv-2"))
    assert env["RAFTSET_POD_NAME"] == "kv-2"
    assert env["RAFTSET_HEARTBEAT_INTERVAL"] == "2"
    assert env["RAFTSET_TLS_DIR"] == ""


def test_declared_env_refuses_what_it_cannot_resolve() -> None:
    secret = [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    with pytest.raises(ValueError, match="only fieldRef"):
        podrunner.declared_env(pod(env=secret))
    missing = [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.generateName"}}}]
    with pytest.raises(ValueError, match="not set"):
        podrunner.declared_env(pod(env=missing))
    no_sidecar = pod()
    no_sidecar["spec"]["initContainers"] = []
    with pytest.raises(ValueError, match="no 'sidecar' container"):
        podrunner.declared_env(no_sidecar)


def test_loopback_env_overrides_only_network_volumes_and_credentials() -> None:
    declared = podrunner.declared_env(pod("kv-2"))
    env = podrunner.loopback_env(declared, "127.150.3", 2, data_dir=Path("/v/prod/kv-2/data"),
                                 run_dir=Path("/p/u-1/run"), kubeconfig="/p/u-1/kubeconfig")
    assert env["RAFTSET_LISTEN_PEER_URL"] == "http://127.150.3.12:2380"
    assert env["RAFTSET_LISTEN_CLIENT_URL"] == "http://127.150.3.12:2379"
    assert env["RAFTSET_HTTP_ADDRESS"] == "127.150.3.12:8080"
    assert env["RAFTSET_DATA_DIR"] == "/v/prod/kv-2/data"
    assert env["RAFTSET_RUN_DIR"] == "/p/u-1/run"
    assert env["KUBECONFIG"] == "/p/u-1/kubeconfig"
    changed = {k for k in env if env[k] != declared.get(k)}
    assert changed == {"RAFTSET_PEER_URL_TEMPLATE", "RAFTSET_CLIENT_URL_TEMPLATE", "RAFTSET_LISTEN_PEER_URL",
                       "RAFTSET_LISTEN_CLIENT_URL", "RAFTSET_LISTEN_METRICS_URL", "RAFTSET_HTTP_ADDRESS",
                       "RAFTSET_DATA_DIR", "RAFTSET_RUN_DIR", "KUBECONFIG"}
    assert env["RAFTSET_LISTEN_METRICS_URL"] == "http://127.150.3.12:2381"
    for key, value in env.items():
        if key.endswith(("_URL", "_TEMPLATE", "ADDRESS")):
            host = value.split("//")[-1].split(":")[0]
            assert host.startswith("127."), f"{key}={value} is not loopback"


@pytest.mark.parametrize("declared,reason", [
    ({"RAFTSET_ENGINE": "etcd", "RAFTSET_TLS_DIR": ""}, None),
    ({}, None),  # the sidecar's defaults: etcd, plaintext
    ({"RAFTSET_ENGINE": "xline"}, None),
    ({"RAFTSET_ENGINE": "tikv"}, "not one raftset knows"),
    ({"RAFTSET_ENGINE": "etcd", "RAFTSET_TLS_DIR": "/etc/raftset/tls"}, None),  # served with loopback certificates
])
def test_skip_reason(declared: dict[str, str], reason: str | None) -> None:
    got = podrunner.skip_reason(declared)
    assert got is None if reason is None else reason in got


def test_ephemeral_means_an_emptydir_named_data() -> None:
    assert not podrunner.ephemeral(pod())
    assert podrunner.ephemeral(pod(volumes=[{"name": "run", "emptyDir": {}}, {"name": "data", "emptyDir": {}}]))
    assert not podrunner.ephemeral(pod(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "x"}}]))


def test_the_claim_is_the_data_volumes() -> None:
    assert podrunner.claim_name(pod()) is None
    assert podrunner.claim_name(pod(volumes=[{"name": "data", "emptyDir": {}}])) is None
    assert podrunner.claim_name(pod(volumes=[{"name": "other", "persistentVolumeClaim": {"claimName": "y"}},
                                             {"name": "data", "persistentVolumeClaim": {"claimName": "data-kv-2"}}])
                                ) == "data-kv-2"


def test_tls_env_points_at_the_local_copy_and_speaks_https() -> None:
    declared = podrunner.declared_env(pod("kv-2")) | {"RAFTSET_TLS_DIR": "/etc/raftset/tls"}
    kwargs = {"data_dir": Path("/d"), "run_dir": Path("/r"), "kubeconfig": "/k"}
    env = podrunner.loopback_env(declared, "127.150.3", 2, tls_dir=Path("/p/u-1/tls"), **kwargs)
    assert env["RAFTSET_TLS_DIR"] == "/p/u-1/tls"
    assert env["RAFTSET_LISTEN_CLIENT_URL"] == "https://127.150.3.12:2379"
    assert env["RAFTSET_PEER_URL_TEMPLATE"] == "https://127.150.3.1{ordinal}:2380"
    with pytest.raises(ValueError, match="no local copy"):
        podrunner.loopback_env(declared, "127.150.3", 2, **kwargs)


def tls_pod() -> dict[str, Any]:
    return pod(volumes=[{"name": "run", "emptyDir": {}}, tls_volume(builders.cluster())])


def test_tls_sources_are_the_projected_secret_items() -> None:
    sources = podrunner.tls_sources(tls_pod())
    assert (f"{builders.CLUSTER}-server-tls", "ca.crt", "ca.crt") in sources
    assert (f"{builders.CLUSTER}-peer-tls", "tls.key", "peer.key") in sources
    assert {path for _, _, path in sources} == {"ca.crt", "server.crt", "server.key", "peer.crt", "peer.key",
                                               "client.crt", "client.key"}
    assert podrunner.tls_sources(pod()) == []


def test_project_tls_adds_the_loopback_address_and_keeps_names_usages_and_the_ca() -> None:
    now = datetime.now(timezone.utc)
    ca = certificates.build_ca("kv-ca", now)
    leaves = {p: certificates.issue(ca, spec, now) for p, spec in certificates.leaf_specs("kv", "prod", 3).items()}
    files = {"ca.crt": ca.cert_pem, "client.crt": leaves["client"].cert_pem, "client.key": leaves["client"].key_pem}
    for purpose in ("server", "peer"):
        files[f"{purpose}.crt"], files[f"{purpose}.key"] = leaves[purpose].cert_pem, leaves[purpose].key_pem
    other = certificates.build_ca("another-ca", now)
    out = podrunner.project_tls(files, [other, ca], "127.150.3.12")  # each leaf re-issued by its own signer
    for purpose in ("server", "peer"):
        pair = certificates.KeyPair(out[f"{purpose}.crt"], out[f"{purpose}.key"])
        assert certificates.matches_key(pair) and certificates.signed_by(pair.cert_pem, ca.cert_pem)
        dns, ips = certificates.subject_alt_names(pair.cert_pem)
        old_dns, old_ips = certificates.subject_alt_names(files[f"{purpose}.crt"])
        assert dns == old_dns and ips == old_ips | {"127.150.3.12"}
        assert certificates.has_usages(pair.cert_pem, certificates.leaf_specs("kv", "prod")[purpose])
    assert {k: out[k] for k in ("ca.crt", "client.crt", "client.key")} == \
        {k: files[k] for k in ("ca.crt", "client.crt", "client.key")}
    with pytest.raises(ValueError, match="cert-manager"):
        podrunner.project_tls(files, [], "127.150.3.12")
    with pytest.raises(ValueError, match="no key of the CA that signed server.crt"):
        podrunner.project_tls(files, [other], "127.150.3.12")


def test_grace_defaults_like_kubernetes() -> None:
    assert podrunner.grace_seconds(pod(grace=60)) == 60
    assert podrunner.grace_seconds(pod(grace=0)) == 0
    assert podrunner.grace_seconds(pod(grace=None)) == 30


def test_token_kubeconfig_keeps_server_and_ca_and_drops_the_admin_credentials() -> None:
    admin = {
        "clusters": [{"name": "other", "cluster": {"server": "https://127.0.0.9:1"}},
                     {"name": "dev", "cluster": {"server": "https://127.70.4.1:6443", "certificate-authority-data": "Q0E="}}],
        "users": [{"name": "admin", "user": {"client-key-data": "secret"}}],
        "contexts": [{"name": "x", "context": {"cluster": "other", "user": "admin"}},
                     {"name": "dev", "context": {"cluster": "dev", "user": "admin"}}],
        "current-context": "dev",
    }
    config = kubeconfig.with_token(admin, "tok", "pod")
    assert config["clusters"][0]["cluster"] == {"server": "https://127.70.4.1:6443", "certificate-authority-data": "Q0E="}
    assert config["users"] == [{"name": "pod", "user": {"token": "tok"}}]
    assert "secret" not in repr(config)


@pytest.fixture
def builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Path]]:
    """Every known store build present, in a cache of the test's own: the host's may be half built."""
    known = {engine: [(v, tmp_path / path.name) for v, path in pairs]
             for engine, pairs in podrunner._store_builds().items()}
    for pairs in known.values():
        for _, path in pairs:
            path.mkdir()
    monkeypatch.setattr(podrunner, "_store_builds", lambda: known)
    return {engine: dict(pairs) for engine, pairs in known.items()}


def test_the_store_runs_the_build_its_image_names(builds: dict[str, dict[str, Path]]) -> None:
    from tools.devcluster import build, xline

    etcd = builds["etcd"]
    assert podrunner.store_bin_dir("etcd", "gcr.io/etcd-development/etcd:v3.6.16") == etcd["3.6.16"]
    assert podrunner.store_bin_dir("etcd", "gcr.io/etcd-development/etcd:v3.5.35") == etcd["3.5.35"]
    assert podrunner.store_bin_dir("etcd", "mirror/etcd:custom") == etcd[build.ETCD.version]
    assert podrunner.store_bin_dir("xline", "ghcr.io/xline-kv/xline:v0.7.0") == builds["xline"][xline.XLINE.version]


def test_a_version_without_a_local_build_runs_the_default_and_says_so(builds: dict[str, dict[str, Path]]) -> None:
    from tools.devcluster import build, xline

    assert podrunner.store_build("etcd", "gcr.io/etcd-development/etcd:v3.6.16")[1] is None
    path, note = podrunner.store_build("etcd", "gcr.io/etcd-development/etcd:v3.5.17")
    assert path == builds["etcd"][build.ETCD.version] and note is not None
    assert "3.5.17" in note and f"runs etcd {build.ETCD.version}" in note
    _, note = podrunner.store_build("xline", "ghcr.io/xline-kv/xline:v0.7.0")
    assert note is not None and xline.XLINE.version in note  # the one Xline build stands in for v0.7.0


def test_a_store_whose_builds_are_all_missing_names_the_one_it_waits_for(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(podrunner, "_store_builds", lambda: {"etcd": [("3.7.3", tmp_path / "etcd-3.7.3")]})
    path, note = podrunner.store_build("etcd", "gcr.io/etcd-development/etcd:v3.6.16")
    assert path == tmp_path / "etcd-3.7.3" and note == "etcd 3.7.3 is not built yet: its store cannot start until it is"


def test_an_xline_member_pushes_its_metrics_instead_of_binding_all_interfaces() -> None:
    declared = {**podrunner.declared_env(pod("kv-0")), "RAFTSET_ENGINE": "xline",
                "RAFTSET_OPTIONS": json.dumps({"quota-bytes": "1"})}
    env = podrunner.loopback_env(declared, "127.150.3", 0, data_dir=Path("/d"), run_dir=Path("/r"), kubeconfig="/k")
    assert json.loads(env["RAFTSET_OPTIONS"]) == {"quota-bytes": "1", "metrics-push": "",
                                                  "metrics-push-endpoint": "http://127.0.0.1:4318"}


def test_the_xline_store_runs_the_cached_xline_build_whatever_its_tag(builds: dict[str, dict[str, Path]]) -> None:
    from tools.devcluster import xline

    built = builds["xline"][xline.XLINE.version]
    assert podrunner.store_bin_dir("xline", f"ghcr.io/xline-kv/xline:v{xline.XLINE.version}") == built
    assert podrunner.store_bin_dir("xline", "ghcr.io/xline-kv/xline:v3.6.16") == built


def test_a_volume_starts_empty_when_lost_or_a_new_emptydir() -> None:
    claimed = pod(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data-kv-2"}}])
    empty_dir = pod(volumes=[{"name": "data", "emptyDir": {}}])
    assert not podrunner.starts_empty(claimed, lost=False)
    assert podrunner.starts_empty(claimed, lost=True)
    assert podrunner.starts_empty(empty_dir, lost=False)
    assert not podrunner.starts_empty(pod(), lost=False)  # no data volume: the per-pod directory is kept


def rendered_pod(c: Any) -> dict[str, Any]:
    template = pod_template(c)
    return {"metadata": {**template["metadata"], "name": "demo-0", "namespace": "ns", "uid": "u-1"},
            "spec": template["spec"]}


def test_the_sidecar_mounts_its_backup_secrets_and_claim() -> None:
    s3 = {"bucket": "b", "endpoint": "https://s3.example", "credentialsSecret": "s3-credentials",
          "caSecret": {"name": "s3-ca", "key": "bundle.pem"}}
    c = builders.cluster(backup={"pvc": {"claimName": "etcd-backups"}},
                         bootstrap={"fromBackup": {"backup": "latest", "s3": s3}})
    assert podrunner.sidecar_mounts(rendered_pod(c)) == [
        podrunner.SidecarMount(contract.BACKUP_VOLUME_MOUNT, claim="etcd-backups"),
        podrunner.SidecarMount(contract.RESTORE_CREDENTIALS_MOUNT, secret="s3-credentials", optional=True,
                               items=((contract.ACCESS_KEY_FILE, contract.ACCESS_KEY_FILE),
                                      (contract.SECRET_KEY_FILE, contract.SECRET_KEY_FILE))),
        podrunner.SidecarMount(contract.RESTORE_CA_MOUNT, secret="s3-ca", optional=True,
                               items=(("bundle.pem", "bundle.pem"),)),
    ]
    assert podrunner.sidecar_mounts(rendered_pod(builders.cluster())) == []


def test_a_secret_mount_without_items_takes_every_key() -> None:
    p = pod(volumes=[{"name": "creds", "secret": {"secretName": "s"}}, {"name": "run", "emptyDir": {}}])
    p["spec"]["initContainers"][0]["volumeMounts"] = [{"name": "creds", "mountPath": "/c"},
                                                      {"name": "run", "mountPath": "/run"}]
    assert podrunner.sidecar_mounts(p) == [podrunner.SidecarMount("/c", secret="s")]


def test_a_pod_not_run_says_why_on_itself_and_on_its_cluster() -> None:
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    meta = rendered_pod(builders.cluster(contract.KIND_XLINE))["metadata"]
    events = podrunner.not_run_events(meta, "no CA key", now)
    assert [(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events] == [
        ("Pod", "demo-0"), (contract.KIND_XLINE, meta["labels"][contract.LABEL_INSTANCE])]
    for event in events:
        assert event["type"] == "Warning" and event["reason"] == podrunner.NOT_RUN_REASON
        assert event["involvedObject"]["namespace"] == "ns"
        assert event["message"] == "demo-0: not run by make run's pod runner: no CA key"
        assert event["firstTimestamp"] == event["lastTimestamp"] == now
    assert events[0]["involvedObject"]["uid"] == "u-1"
    unknown = {**meta, "labels": {**meta["labels"], contract.LABEL_ENGINE: "tikv"}}
    assert [e["involvedObject"]["kind"] for e in podrunner.not_run_events(unknown, "r", now)] == ["Pod"]
    unlabelled = {k: v for k, v in meta.items() if k != "labels"}
    assert [e["involvedObject"]["kind"] for e in podrunner.not_run_events(unlabelled, "r", now)] == ["Pod"]


def test_a_container_inherits_only_the_basics_with_its_binaries_first(monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.devcluster import kubelet

    monkeypatch.setenv("PATH", "/usr/bin")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    monkeypatch.setenv("ETCD_NAME", "x")
    env = kubelet.container_env(Path("/cache/bin/etcd-3.6.16"))
    assert env["PATH"] == "/cache/bin/etcd-3.6.16:/usr/bin"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert "HTTPS_PROXY" not in env and "ETCD_NAME" not in env
    assert kubelet.container_env()["PATH"] == "/usr/bin"


def test_the_probes_run_are_the_rendered_ones_scaled_down() -> None:
    """The store's readinessProbe (/readyz) and livenessProbe (its client port), the sidecar's
    livenessProbe (/livez), as the operator renders them, ten times faster."""
    rendered = {"metadata": {"name": "kv-0"}, "spec": pod_template(builders.cluster())["spec"]}
    probes = podrunner.pod_probes(rendered, "etcd")
    assert probes.store_readiness is not None and probes.store_readiness.path == "/readyz"
    assert probes.store_readiness.port == contract.SIDECAR_PORT
    assert (probes.store_readiness.period, probes.store_readiness.failure_threshold) == (0.5, 3)
    assert probes.store_liveness is not None and probes.store_liveness.path is None
    assert (probes.store_liveness.port, probes.store_liveness.period) == (contract.CLIENT_PORT, 1.0)
    assert probes.sidecar_liveness is not None and probes.sidecar_liveness.path == "/livez"
    assert (probes.sidecar_liveness.period, probes.sidecar_liveness.failure_threshold) == (1.0, 3)


def test_the_pods_ready_condition_as_listed() -> None:
    assert podrunner.pod_ready({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert not podrunner.pod_ready({"status": {"conditions": [{"type": "Ready", "status": "False"},
                                                              {"type": "Initialized", "status": "True"}]}})
    assert not podrunner.pod_ready({"status": {}})


def test_an_engine_not_built_yet_is_said_not_substituted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make run` builds Xline in the background: a pod of it meanwhile gets a note, not another engine."""
    from tools.devcluster import build, xline

    monkeypatch.setenv("RAFTSET_CACHE", str(tmp_path))
    (build.ETCDS[1].out_dir).mkdir(parents=True)  # only an older etcd is built
    path, note = podrunner.store_build("xline", f"ghcr.io/xline-kv/xline:v{xline.XLINE.version}")
    assert path == xline.XLINE.out_dir and note is not None and "not built yet" in note
    path, note = podrunner.store_build("etcd", f"gcr.io/etcd-development/etcd:v{build.ETCD.version}")
    assert path == build.ETCDS[1].out_dir and note is not None and build.ETCDS[1].version in note
