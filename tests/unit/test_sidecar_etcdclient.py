"""The etcd client's pure parts: refusals, targets, TLS material checked up front."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftset.engines import TLSFiles
from raftset.sidecar.io.etcdclient import ClientTLS, EtcdClientError, Refusal, TLSConfigError, Unreachable, grpc_target
from tests.harness.certs import write_tls_dir

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("message", "refusal"), [
    ("etcdserver: too many learner members in cluster", Refusal.TOO_MANY_LEARNERS),
    ("etcdserver: can only promote a learner member which is in sync with leader", Refusal.LEARNER_NOT_READY),
    ("etcdserver: can only promote a learner member", Refusal.NOT_A_LEARNER),
    ("etcdserver: member not found", Refusal.MEMBER_NOT_FOUND),
    ("etcdserver: corrupt cluster", Refusal.CORRUPT),
    ("etcdserver: unhealthy cluster", Refusal.UNHEALTHY),
    ("etcdserver: re-configuration failed due to not enough started members", Refusal.NOT_ENOUGH_STARTED),
    ("etcdserver: rpc not supported for learner", Refusal.LEARNER_RPC),
    ("etcdserver: Peer URLs already exists", Refusal.PEER_URL_EXISTS),
    ("etcdserver: member ID already exist", Refusal.MEMBER_EXISTS),
    ("etcdserver: not leader", Refusal.NOT_LEADER),
    ("something else", Refusal.OTHER),
])
def test_refusals_are_read_from_the_members_message(message: str, refusal: Refusal) -> None:
    assert Refusal.of(message) is refusal
    assert EtcdClientError("u", "op", message, reachable=True).refusal is refusal


def test_an_unreachable_member_refused_nothing() -> None:
    err = Unreachable("http://x:2379", "MemberAdd", "etcdserver: unhealthy cluster")
    assert not err.reachable and err.refusal is Refusal.OTHER


@pytest.mark.parametrize(("url", "target"), [
    ("http://127.0.9.1:2379", "127.0.9.1:2379"),
    ("https://demo-0.demo-peer.ns.svc:2379", "demo-0.demo-peer.ns.svc:2379"),
    ("127.0.0.1:2379", "127.0.0.1:2379"),
])
def test_grpc_targets(url: str, target: str) -> None:
    assert grpc_target(url) == target


@pytest.mark.parametrize("url", ["http://host", "http://:2379", ""])
def test_bad_client_urls(url: str) -> None:
    with pytest.raises(ValueError):
        grpc_target(url)


def test_tls_material_loads(tmp_path: Path) -> None:
    write_tls_dir(tmp_path, ["127.0.0.1"])
    tls = ClientTLS.load(TLSFiles.under(str(tmp_path)))
    assert tls.ca.startswith(b"-----BEGIN CERTIFICATE") and b"PRIVATE KEY" in tls.key


@pytest.mark.parametrize(("broken", "content", "message"), [
    ("client.key", None, "cannot read TLS file .*/client.key"),
    ("ca.crt", b"junk", "ca.crt is not a PEM CA certificate"),
    ("client.crt", b"junk", "client.crt is not a PEM certificate"),
    ("client.key", b"junk", "client.key is not an unencrypted PEM key"),
])
def test_bad_tls_material_names_the_file(tmp_path: Path, broken: str, content: bytes | None, message: str) -> None:
    write_tls_dir(tmp_path, ["127.0.0.1"])
    if content is None:
        (tmp_path / broken).unlink()
    else:
        (tmp_path / broken).write_bytes(content)
    with pytest.raises(TLSConfigError, match=message):
        ClientTLS.load(TLSFiles.under(str(tmp_path)))


def test_a_key_of_another_certificate_is_refused_up_front(tmp_path: Path) -> None:
    write_tls_dir(tmp_path / "mine", ["127.0.0.1"])
    write_tls_dir(tmp_path / "other", ["127.0.0.1"])
    (tmp_path / "mine" / "client.key").write_bytes((tmp_path / "other" / "client.key").read_bytes())
    with pytest.raises(TLSConfigError, match="client.key is not an unencrypted PEM key of .*/client.crt"):
        ClientTLS.load(TLSFiles.under(str(tmp_path / "mine")))
