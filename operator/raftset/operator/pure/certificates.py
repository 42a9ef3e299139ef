"""The `auto` TLS provider's certificate authority, as pure functions over PEM bytes.

Every cluster gets its own CA (ECDSA P-256, 10 years, kept in `<name>-ca`) and three
leaf certificates (1 year) in cert-manager's Secret shape (`tls.crt`, `tls.key`,
`ca.crt`), so the pod template mounts the same files whichever provider made them.
`issuance` decides what to (re-)issue from what the Secrets hold; `raftset.operator.components.tls`
reads and writes the Secrets.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from raftset import contract

CA_LIFETIME = timedelta(days=3650)
LEAF_LIFETIME = timedelta(days=365)
RENEW_BEFORE = timedelta(days=30)
# Certificates are valid a little before they are made: nodes' clocks differ.
BACKDATE = timedelta(minutes=5)
CLIENT_COMMON_NAME = "root"  # etcd maps a client certificate's CN to its auth user
LOOPBACK_IPS = ("127.0.0.1",)

KEY_CERT = "tls.crt"
KEY_KEY = "tls.key"
KEY_CA = "ca.crt"

SERVER, PEER, CLIENT = "server", "peer", "client"
PURPOSES = (SERVER, PEER, CLIENT)


def secret_name(cluster: str, purpose: str) -> str:
    """`<name>-server-tls`, `<name>-peer-tls`, `<name>-client-tls`."""
    return f"{cluster}-{purpose}-tls"


def ca_secret_name(cluster: str) -> str:
    return f"{cluster}-ca"


# --- what each certificate must say -------------------------------------------------------

@dataclass(frozen=True)
class LeafSpec:
    """The identity and usages one leaf certificate needs."""

    purpose: str
    common_name: str
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    server_auth: bool = False
    client_auth: bool = False


def peer_domains(cluster: str, namespace: str) -> tuple[str, str]:
    """The headless Service's domain, short and fully qualified."""
    short = f"{contract.peer_service_name(cluster)}.{namespace}.svc"
    return short, f"{short}.cluster.local"


def member_dns_names(cluster: str, namespace: str, ordinals: Iterable[int]) -> tuple[str, ...]:
    """Every member pod's DNS names plus the wildcard that covers any later ordinal."""
    names = [f"{contract.pod_name(cluster, o)}.{domain}"
             for o in sorted(set(ordinals)) for domain in peer_domains(cluster, namespace)]
    names += [f"*.{domain}" for domain in peer_domains(cluster, namespace)]
    return tuple(names)


def client_dns_names(cluster: str, namespace: str) -> tuple[str, ...]:
    service = contract.client_service_name(cluster)
    return (service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local", "localhost")


def leaf_specs(cluster: str, namespace: str, replicas: int = 0) -> dict[str, LeafSpec]:
    """The three leaves of one cluster, keyed by purpose.

    The server certificate has client auth too: etcd's gRPC gateway dials its own
    listener presenting the server certificate, and a CA-checked listener refuses it otherwise.
    """
    members = member_dns_names(cluster, namespace, range(max(replicas, contract.NAMED_ORDINALS)))
    return {
        SERVER: LeafSpec(SERVER, f"{cluster}-server", members + client_dns_names(cluster, namespace),
                         LOOPBACK_IPS, server_auth=True, client_auth=True),
        PEER: LeafSpec(PEER, f"{cluster}-peer", members, LOOPBACK_IPS,
                       server_auth=True, client_auth=True),
        # No SANs on purpose: etcd checks a client certificate's SANs against the caller's
        # address when there are any, and the sidecar dials from wherever it runs.
        CLIENT: LeafSpec(CLIENT, CLIENT_COMMON_NAME, client_auth=True),
    }


# --- making certificates ------------------------------------------------------------------

@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("expected an ECDSA key")
        return key


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, contract.MANAGER),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def build_ca(common_name: str, now: datetime, lifetime: timedelta = CA_LIFETIME) -> KeyPair:
    """A self-signed CA that may sign leaves only (path length 0)."""
    key = _new_key()
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE).not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _authority_key_id(ca_cert: x509.Certificate) -> x509.AuthorityKeyIdentifier:
    """The CA's own subject key id (RFC 5280 wants one in every CA): verifiers (OpenSSL, Go) look the issuer up
    by it, and a CA made elsewhere (cert-manager's) need not derive it from its key as `build_ca` does."""
    ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def issue(ca: KeyPair, leaf: LeafSpec, now: datetime, lifetime: timedelta = LEAF_LIFETIME) -> KeyPair:
    """A leaf certificate for `leaf`, signed by `ca`, never outliving the CA."""
    key = _new_key()
    ca_cert = ca.cert
    usages = [oid for wanted, oid in ((leaf.server_auth, ExtendedKeyUsageOID.SERVER_AUTH),
                                      (leaf.client_auth, ExtendedKeyUsageOID.CLIENT_AUTH)) if wanted]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(leaf.common_name)).issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + lifetime, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                     content_commitment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(_authority_key_id(ca_cert), critical=False)
    )
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in leaf.dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in leaf.ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca.key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


# --- reading certificates -----------------------------------------------------------------

def not_after(cert_pem: bytes) -> datetime:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def needs_renewal(cert_pem: bytes, now: datetime, before: timedelta = RENEW_BEFORE) -> bool:
    """Renew once less than `before` is left, long before anything stops trusting it."""
    return not_after(cert_pem) - now < before


def subject_alt_names(cert_pem: bytes) -> tuple[frozenset[str], frozenset[str]]:
    """(DNS names, IP addresses) of a certificate."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return frozenset(), frozenset()
    return (frozenset(sans.get_values_for_type(x509.DNSName)),
            frozenset(str(ip) for ip in sans.get_values_for_type(x509.IPAddress)))


def covers(cert_pem: bytes, leaf: LeafSpec) -> bool:
    """Does the certificate name at least every DNS name and IP `leaf` needs?"""
    dns, ips = subject_alt_names(cert_pem)
    return set(leaf.dns_names) <= dns and set(leaf.ip_addresses) <= ips


def _usages(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    try:
        return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        return set()


def has_usages(cert_pem: bytes, leaf: LeafSpec) -> bool:
    usages = _usages(x509.load_pem_x509_certificate(cert_pem))
    return ((not leaf.server_auth or ExtendedKeyUsageOID.SERVER_AUTH in usages)
            and (not leaf.client_auth or ExtendedKeyUsageOID.CLIENT_AUTH in usages))


def signed_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    cert = x509.load_pem_x509_certificate(cert_pem)
    ca = x509.load_pem_x509_certificate(ca_pem)
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def matches_key(pair: KeyPair) -> bool:
    """Does the private key belong to the certificate (a half-written Secret does not)?"""
    return pair.cert.public_key() == pair.key.public_key()


# --- deciding ------------------------------------------------------------------------------

@dataclass(frozen=True)
class StoredLeaf:
    """One leaf Secret as found in the API."""

    pair: KeyPair
    ca_pem: bytes
    revision: int


@dataclass(frozen=True)
class Issuance:
    """What `ensure_tls` must write for the `auto` provider.

    `revision` goes into the pod template: it moves only when the running certificates
    must be replaced (expiry, a new CA), so the workload rolls one pod at a time then,
    and not when a leaf is merely re-issued with more names (pods keep valid certificates).
    """

    new_ca: bool
    reissue: Mapping[str, str] = field(default_factory=dict)  # purpose -> reason
    revision: int = 1

    @property
    def writes(self) -> bool:
        return self.new_ca or bool(self.reissue)


def _readable(leaf: StoredLeaf | None) -> bool:
    try:
        return leaf is not None and matches_key(leaf.pair)
    except ValueError:
        return False


def _ca_usable(ca: KeyPair | None, now: datetime) -> bool:
    try:
        return ca is not None and matches_key(ca) and not needs_renewal(ca.cert_pem, now)
    except ValueError:
        return False


def issuance(ca: KeyPair | None, leaves: Mapping[str, StoredLeaf | None],
         specs: Mapping[str, LeafSpec], now: datetime) -> Issuance:
    """Which certificates to (re-)issue, and the revision the pods must run."""
    new_ca = not _ca_usable(ca, now)
    stored = [leaf for leaf in leaves.values() if leaf is not None]
    revision = max((leaf.revision for leaf in stored), default=0)
    reissue: dict[str, str] = {}
    for purpose, spec in specs.items():
        leaf = leaves.get(purpose)
        if leaf is None or not _readable(leaf):
            reissue[purpose] = "missing"
        elif new_ca or ca is None or not signed_by(leaf.pair.cert_pem, ca.cert_pem) \
                or leaf.ca_pem.strip() != ca.cert_pem.strip():
            reissue[purpose] = "new CA"
        elif needs_renewal(leaf.pair.cert_pem, now):
            reissue[purpose] = "expiring"
        elif not has_usages(leaf.pair.cert_pem, spec):
            reissue[purpose] = "usages"
        elif not covers(leaf.pair.cert_pem, spec):
            reissue[purpose] = "names"
    # Pods must restart onto certificates that replace what they run, not onto a first
    # issue (nothing runs yet) nor onto a leaf that only gained names.
    replaces = any(reason in ("new CA", "expiring", "usages") for reason in reissue.values())
    if revision == 0:
        revision = 1
    elif replaces:
        revision += 1
    return Issuance(new_ca=new_ca, reissue=reissue, revision=revision)


# --- Secrets ---------------------------------------------------------------------------------

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def secret_data(pair: KeyPair, ca_pem: bytes) -> dict[str, str]:
    """cert-manager's shape, base64 as the API wants it."""
    return {KEY_CERT: _b64(pair.cert_pem), KEY_KEY: _b64(pair.key_pem), KEY_CA: _b64(ca_pem)}


def read_secret(secret: Mapping[str, Any] | None) -> tuple[KeyPair, bytes, int] | None:
    """(key pair, ca.crt, revision) from a Secret as the API returns it; None if unusable."""
    if not secret:
        return None
    data = secret.get("data") or {}
    try:
        cert, key = base64.b64decode(data[KEY_CERT]), base64.b64decode(data[KEY_KEY])
        ca = base64.b64decode(data.get(KEY_CA) or "")
    except (KeyError, ValueError, TypeError):
        return None
    if not cert or not key:
        return None
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    try:
        revision = int(annotations.get(contract.ANNOTATION_TLS_REVISION, "0"))
    except ValueError:
        revision = 0
    return KeyPair(cert, key), ca, revision
