"""The auto provider's CA: SANs, chains, expiry and the re-issue/renewal decisions."""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
from datetime import datetime, timedelta, timezone

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from raftset import contract
from raftset.operator.pure import certificates as certs
from raftset.operator.pure.certificates import CLIENT, PEER, SERVER, KeyPair, LeafSpec, StoredLeaf

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
SPECS = certs.leaf_specs("kv", "db", 3)


@pytest.fixture(scope="module")
def ca() -> KeyPair:
    return certs.build_ca("kv-ca", NOW)


@pytest.fixture(scope="module")
def leaves(ca: KeyPair) -> dict[str, KeyPair]:
    return {purpose: certs.issue(ca, spec, NOW) for purpose, spec in SPECS.items()}


def stored(leaves: dict[str, KeyPair], ca: KeyPair, revision: int = 1) -> dict[str, StoredLeaf | None]:
    return {p: StoredLeaf(pair, ca.cert_pem, revision) for p, pair in leaves.items()}


# --- names ----------------------------------------------------------------------------------

def test_secret_names() -> None:
    assert [certs.secret_name("kv", p) for p in certs.PURPOSES] == ["kv-server-tls", "kv-peer-tls", "kv-client-tls"]
    assert certs.ca_secret_name("kv") == "kv-ca"


def test_server_sans_name_every_pod_the_wildcard_and_the_client_service() -> None:
    server = SPECS[SERVER]
    for ordinal in range(contract.NAMED_ORDINALS):
        assert f"kv-{ordinal}.kv-peer.db.svc" in server.dns_names
        assert f"kv-{ordinal}.kv-peer.db.svc.cluster.local" in server.dns_names
    assert {"*.kv-peer.db.svc", "*.kv-peer.db.svc.cluster.local"} <= set(server.dns_names)
    assert {"kv-client", "kv-client.db", "kv-client.db.svc", "kv-client.db.svc.cluster.local",
            "localhost"} <= set(server.dns_names)
    assert server.ip_addresses == ("127.0.0.1",)
    assert server.server_auth and server.client_auth  # etcd's gateway presents it as a client
    assert len(set(server.dns_names)) == len(server.dns_names)


def test_peer_sans_are_the_members_only() -> None:
    peer = SPECS[PEER]
    assert "kv-client" not in peer.dns_names
    assert set(peer.dns_names) == set(certs.member_dns_names("kv", "db", range(contract.NAMED_ORDINALS)))
    assert peer.server_auth and peer.client_auth


def test_client_certificate_has_no_names() -> None:
    client = SPECS[CLIENT]
    assert client == LeafSpec(CLIENT, "root", (), (), server_auth=False, client_auth=True)


@pytest.mark.parametrize("replicas", [1, 3, 9])
def test_names_do_not_depend_on_replicas_up_to_the_crd_maximum(replicas: int) -> None:
    """Scaling never changes the SANs, so it never re-issues a certificate."""
    assert certs.leaf_specs("kv", "db", replicas) == SPECS


def test_more_replicas_than_covered_get_their_names() -> None:
    assert "kv-11.kv-peer.db.svc" in certs.leaf_specs("kv", "db", 12)[PEER].dns_names


# --- making ------------------------------------------------------------------------------------

def test_ca(ca: KeyPair) -> None:
    cert = ca.cert
    assert cert.issuer == cert.subject
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca and constraints.path_length == 0
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert isinstance(ca.key, ec.EllipticCurvePrivateKey) and ca.key.curve.name == "secp256r1"
    assert cert.not_valid_after_utc - NOW == certs.CA_LIFETIME
    assert cert.not_valid_before_utc < NOW
    assert certs.matches_key(ca)


@pytest.mark.parametrize("purpose", certs.PURPOSES)
def test_leaf(ca: KeyPair, leaves: dict[str, KeyPair], purpose: str) -> None:
    pair, spec = leaves[purpose], SPECS[purpose]
    cert = pair.cert
    assert certs.signed_by(pair.cert_pem, ca.cert_pem)
    assert certs.matches_key(pair)
    assert cert.not_valid_after_utc - NOW == certs.LEAF_LIFETIME
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert certs.subject_alt_names(pair.cert_pem) == (frozenset(spec.dns_names), frozenset(spec.ip_addresses))
    assert certs.covers(pair.cert_pem, spec) and certs.has_usages(pair.cert_pem, spec)
    assert cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == spec.common_name


def test_leaf_never_outlives_its_ca() -> None:
    short = certs.build_ca("short", NOW, lifetime=timedelta(days=40))
    leaf = certs.issue(short, SPECS[PEER], NOW)
    assert leaf.cert.not_valid_after_utc == short.cert.not_valid_after_utc


def test_a_leaf_names_its_ca_by_the_cas_own_key_id_however_it_was_made() -> None:
    # cert-manager's CA derives its subject key id otherwise than from_public_key: a leaf issued from it must
    # name that id, or OpenSSL and Go find no issuer ("unable to get local issuer certificate").
    own = certs.build_ca("kv-ca", NOW)
    cert = own.cert
    foreign_id = x509.SubjectKeyIdentifier(b"\x65" * 20)
    builder = (x509.CertificateBuilder().subject_name(cert.subject).issuer_name(cert.issuer)
               .public_key(cert.public_key()).serial_number(cert.serial_number)
               .not_valid_before(cert.not_valid_before_utc).not_valid_after(cert.not_valid_after_utc)
               .add_extension(cert.extensions.get_extension_for_class(x509.BasicConstraints).value, critical=True)
               .add_extension(cert.extensions.get_extension_for_class(x509.KeyUsage).value, critical=True)
               .add_extension(foreign_id, critical=False))
    foreign = KeyPair(builder.sign(own.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM), own.key_pem)
    leaf = certs.issue(foreign, SPECS[SERVER], NOW)
    assert leaf.cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier == \
        foreign_id.digest
    _verify_server(foreign, leaf, x509.DNSName("kv-client.db.svc"), NOW)


def _verify_server(ca: KeyPair, pair: KeyPair, name: x509.GeneralName, at: datetime) -> None:
    verifier = (PolicyBuilder().store(Store([ca.cert])).time(at)
                .build_server_verifier(name))
    verifier.verify(pair.cert, [])


@pytest.mark.parametrize("name", [
    x509.DNSName("kv-0.kv-peer.db.svc"),
    x509.DNSName("kv-2.kv-peer.db.svc.cluster.local"),
    x509.DNSName("kv-15.kv-peer.db.svc"),  # beyond the listed ordinals: the wildcard
    x509.DNSName("kv-client.db.svc"),
    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
])
def test_server_chain_verifies_for_every_name_a_client_dials(ca: KeyPair, leaves: dict[str, KeyPair],
                                                              name: x509.GeneralName) -> None:
    _verify_server(ca, leaves[SERVER], name, NOW)


@pytest.mark.parametrize(("name", "at"), [
    (x509.DNSName("kv-0.other-peer.db.svc"), NOW),        # another cluster's name
    (x509.DNSName("kv-0.kv-peer.db.svc"), NOW + timedelta(days=366)),  # expired
])
def test_server_chain_refuses(ca: KeyPair, leaves: dict[str, KeyPair], name: x509.GeneralName, at: datetime) -> None:
    with pytest.raises(VerificationError):
        _verify_server(ca, leaves[SERVER], name, at)


def test_chain_from_another_ca_is_refused(leaves: dict[str, KeyPair]) -> None:
    other = certs.build_ca("other", NOW)
    assert not certs.signed_by(leaves[SERVER].cert_pem, other.cert_pem)
    with pytest.raises(VerificationError):
        _verify_server(other, leaves[SERVER], x509.DNSName("kv-0.kv-peer.db.svc"), NOW)


def test_client_certificate_is_a_client_of_the_ca(ca: KeyPair, leaves: dict[str, KeyPair]) -> None:
    # Not PolicyBuilder's client verifier: its web-PKI profile wants a SAN, which Go and
    # rustls do not, and which would make etcd match the caller's address against it.
    cert = leaves[CLIENT].cert
    assert certs.signed_by(leaves[CLIENT].cert_pem, ca.cert_pem)
    assert cert.not_valid_before_utc <= NOW < cert.not_valid_after_utc
    usages = leaves[CLIENT].cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]


# --- expiry ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("days_later", "renew"), [(0, False), (334, False), (335, False), (336, True),
                                                   (365, True), (400, True)])
def test_needs_renewal_thirty_days_before_expiry(leaves: dict[str, KeyPair], days_later: int, renew: bool) -> None:
    assert certs.needs_renewal(leaves[PEER].cert_pem, NOW + timedelta(days=days_later)) is renew


def test_not_after(leaves: dict[str, KeyPair]) -> None:
    assert certs.not_after(leaves[PEER].cert_pem) == NOW + certs.LEAF_LIFETIME


# --- the decision ------------------------------------------------------------------------------

def test_first_issue_makes_everything_at_revision_one() -> None:
    plan = certs.issuance(None, {p: None for p in certs.PURPOSES}, SPECS, NOW)
    assert plan.new_ca and plan.writes
    assert plan.reissue == {SERVER: "missing", PEER: "missing", CLIENT: "missing"}
    assert plan.revision == 1


def test_current_material_is_left_alone(ca: KeyPair, leaves: dict[str, KeyPair]) -> None:
    plan = certs.issuance(ca, stored(leaves, ca, revision=4), SPECS, NOW + timedelta(days=300))
    assert plan == certs.Issuance(new_ca=False, reissue={}, revision=4)
    assert not plan.writes


def test_expiring_leaves_are_renewed_and_the_pods_roll(ca: KeyPair, leaves: dict[str, KeyPair]) -> None:
    plan = certs.issuance(ca, stored(leaves, ca, revision=2), SPECS, NOW + timedelta(days=340))
    assert not plan.new_ca  # the CA stays: old and new leaves trust each other during the roll
    assert plan.reissue == {SERVER: "expiring", PEER: "expiring", CLIENT: "expiring"}
    assert plan.revision == 3


def test_one_renewed_leaf_moves_the_revision_once(ca: KeyPair, leaves: dict[str, KeyPair]) -> None:
    found = stored(leaves, ca, revision=3)
    found[PEER] = dataclasses.replace(found[PEER], revision=4)  # renewed last time
    plan = certs.issuance(ca, found, SPECS, NOW + timedelta(days=100))
    assert plan.reissue == {} and plan.revision == 4


def test_missing_names_reissue_without_a_roll(ca: KeyPair) -> None:
    narrow = {p: dataclasses.replace(s, dns_names=s.dns_names[:2]) for p, s in SPECS.items()}
    old = {p: certs.issue(ca, spec, NOW) for p, spec in narrow.items()}
    plan = certs.issuance(ca, stored(old, ca, revision=2), SPECS, NOW)
    assert plan.reissue == {SERVER: "names", PEER: "names"}  # the client has no names to miss
    assert plan.revision == 2


def test_wrong_usages_reissue(ca: KeyPair, leaves: dict[str, KeyPair]) -> None:
    found = stored(leaves, ca)
    found[SERVER] = StoredLeaf(certs.issue(ca, dataclasses.replace(SPECS[SERVER], client_auth=False), NOW),
                               ca.cert_pem, 1)
    plan = certs.issuance(ca, found, SPECS, NOW)
    assert plan.reissue == {SERVER: "usages"} and plan.revision == 2


def test_a_lost_leaf_is_reissued_from_the_same_ca(ca: KeyPair, leaves: dict[str, KeyPair]) -> None:
    found = stored(leaves, ca, revision=2)
    found[CLIENT] = None
    plan = certs.issuance(ca, found, SPECS, NOW)
    assert plan == certs.Issuance(new_ca=False, reissue={CLIENT: "missing"}, revision=2)


def test_a_leaf_whose_key_does_not_match_is_reissued(ca: KeyPair, leaves: dict[str, KeyPair]) -> None:
    found = stored(leaves, ca)
    found[PEER] = StoredLeaf(KeyPair(leaves[PEER].cert_pem, leaves[SERVER].key_pem), ca.cert_pem, 1)
    assert certs.issuance(ca, found, SPECS, NOW).reissue == {PEER: "missing"}


def test_a_lost_ca_reissues_everything_and_rolls(ca: KeyPair, leaves: dict[str, KeyPair]) -> None:
    plan = certs.issuance(None, stored(leaves, ca, revision=2), SPECS, NOW)
    assert plan.new_ca and set(plan.reissue.values()) == {"new CA"} and plan.revision == 3


def test_an_expiring_ca_is_replaced(ca: KeyPair, leaves: dict[str, KeyPair]) -> None:
    later = NOW + certs.CA_LIFETIME - timedelta(days=10)
    plan = certs.issuance(ca, stored(leaves, ca), SPECS, later)
    assert plan.new_ca and len(plan.reissue) == 3


def test_leaves_of_another_ca_are_reissued(ca: KeyPair, leaves: dict[str, KeyPair]) -> None:
    other = certs.build_ca("other", NOW)
    plan = certs.issuance(other, stored(leaves, ca), SPECS, NOW)
    assert not plan.new_ca and set(plan.reissue.values()) == {"new CA"}


# --- Secrets -------------------------------------------------------------------------------------

def test_secret_round_trip(ca: KeyPair, leaves: dict[str, KeyPair]) -> None:
    data = certs.secret_data(leaves[PEER], ca.cert_pem)
    assert set(data) == {"tls.crt", "tls.key", "ca.crt"}
    secret = {"metadata": {"annotations": {contract.ANNOTATION_TLS_REVISION: "7"}}, "data": data}
    assert certs.read_secret(secret) == (leaves[PEER], ca.cert_pem, 7)


@pytest.mark.parametrize("secret", [
    None,
    {},
    {"data": {}},
    {"data": {"tls.crt": base64.b64encode(b"x").decode()}},
    {"data": {"tls.crt": "", "tls.key": ""}},  # cert-manager's placeholder before issuance
    {"data": {"tls.crt": "%%%", "tls.key": "%%%"}},
])
def test_unusable_secrets_read_as_missing(secret: dict | None) -> None:
    assert certs.read_secret(secret) is None


def test_secret_without_revision_reads_as_zero(ca: KeyPair, leaves: dict[str, KeyPair]) -> None:
    secret = {"metadata": {"annotations": {contract.ANNOTATION_TLS_REVISION: "x"}},
              "data": certs.secret_data(leaves[PEER], ca.cert_pem)}
    found = certs.read_secret(secret)
    assert found is not None and found[2] == 0
