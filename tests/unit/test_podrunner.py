"""The pod runner's pure parts: loopback addresses, the sidecar's environment, what it skips."""

from __future__ import annotations

import ipaddress
import random
import json
from pathlib import Path
from typing import Any

import pytest

from tools.devcluster import podrunner
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
                       "RAFTSET_LISTEN_CLIENT_URL", "RAFTSET_HTTP_ADDRESS", "RAFTSET_DATA_DIR", "RAFTSET_RUN_DIR",
                       "KUBECONFIG"}
    for key, value in env.items():
        if key.endswith(("_URL", "_TEMPLATE", "ADDRESS")):
            host = value.split("//")[-1].split(":")[0]
            assert host.startswith("127."), f"{key}={value} is not loopback"


@pytest.mark.parametrize("declared,reason", [
    ({"RAFTSET_ENGINE": "etcd", "RAFTSET_TLS_DIR": ""}, None),
    ({}, None),  # the sidecar's defaults: etcd, plaintext
    ({"RAFTSET_ENGINE": "xline"}, None),
    ({"RAFTSET_ENGINE": "tikv"}, "not one raftset knows"),
    ({"RAFTSET_ENGINE": "etcd", "RAFTSET_TLS_DIR": "/etc/raftset/tls"}, "plaintext only"),
])
def test_skip_reason(declared: dict[str, str], reason: str | None) -> None:
    got = podrunner.skip_reason(declared)
    assert got is None if reason is None else reason in got


def test_ephemeral_means_an_emptydir_named_data() -> None:
    assert not podrunner.ephemeral(pod())
    assert podrunner.ephemeral(pod(volumes=[{"name": "run", "emptyDir": {}}, {"name": "data", "emptyDir": {}}]))
    assert not podrunner.ephemeral(pod(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "x"}}]))


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
    config = podrunner.token_kubeconfig(admin, "tok")
    assert config["clusters"][0]["cluster"] == {"server": "https://127.70.4.1:6443", "certificate-authority-data": "Q0E="}
    assert config["users"] == [{"name": "pod", "user": {"token": "tok"}}]
    assert "secret" not in repr(config)


def test_the_store_runs_the_build_its_image_names() -> None:
    from tools.devcluster import build, xline

    by_version = {c.version: c.out_dir for c in build.ETCDS}
    assert podrunner.store_bin_dir("etcd", "gcr.io/etcd-development/etcd:v3.6.16") == by_version["3.6.16"]
    assert podrunner.store_bin_dir("etcd", "gcr.io/etcd-development/etcd:v3.5.35") == by_version["3.5.35"]
    assert podrunner.store_bin_dir("etcd", "mirror/etcd:custom") == build.ETCD.out_dir
    assert podrunner.store_bin_dir("xline", "ghcr.io/xline-kv/xline:v0.7.0") == xline.XLINE.out_dir


def test_an_xline_member_pushes_its_metrics_instead_of_binding_all_interfaces() -> None:
    declared = {**podrunner.declared_env(pod("kv-0")), "RAFTSET_ENGINE": "xline",
                "RAFTSET_OPTIONS": json.dumps({"quota-bytes": "1"})}
    env = podrunner.loopback_env(declared, "127.150.3", 0, data_dir=Path("/d"), run_dir=Path("/r"), kubeconfig="/k")
    assert json.loads(env["RAFTSET_OPTIONS"]) == {"quota-bytes": "1", "metrics-push": "",
                                                  "metrics-push-endpoint": "http://127.0.0.1:4318"}
