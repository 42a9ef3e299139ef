"""Hitless CA rotation for the `auto` provider: trust both, re-issue, then drop the old CA.

A new CA (the old one expiring, or its Secret deleted) must not split the cluster: a
member restarted on leaves of the new CA would be refused by members that trust only the
old one. So the leaves' `ca.crt` becomes a bundle, and the change goes in three phases,
each rolled through the members one at a time (the pod template's TLS revision moves once
per phase, and rolls.py restarts the leader last):

1. `trust`: every leaf keeps its key pair, its `ca.crt` becomes old CA(s) + new CA;
2. `leaves`: once every pod runs phase 1, the leaves are re-issued from the new CA (the
   bundle still holds both, so old and new leaves trust each other);
3. `drop`: once every pod runs phase 2, `ca.crt` is the new CA alone.

Pure: from the signing CA's certificate, the stored leaves and whether the pods run the
leaves' revision. The phase is read back from the Secrets, so nothing lives in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from raftset.operator.pure.certificates import StoredLeaf, signed_by

TRUST, LEAVES, DROP, WAIT = "trust", "leaves", "drop", "wait"


@dataclass(frozen=True)
class Rotation:
    """One phase's writes: purpose -> (re-issue from the signing CA?, the `ca.crt` bundle)."""

    phase: str
    revision: int
    message: str
    writes: Mapping[str, tuple[bool, bytes]] = field(default_factory=dict)


def certs_in(bundle: bytes) -> list[bytes]:
    """The PEM certificates of a bundle, each as its own PEM, in order, without duplicates."""
    certs = x509.load_pem_x509_certificates(bundle) if bundle.strip() else []
    return list(dict.fromkeys(cert.public_bytes(serialization.Encoding.PEM) for cert in certs))


def bundle(*bundles: bytes) -> bytes:
    """One bundle of every certificate in `bundles`, first seen first."""
    return b"".join(dict.fromkeys(pem for b in bundles for pem in certs_in(b)))


def next_phase(ca_pem: bytes, leaves: Mapping[str, StoredLeaf | None], rolled: bool) -> Rotation | None:
    """The next phase of a CA rotation, a wait for the roll, or None when no rotation is under way.

    None also when a leaf is missing or unreadable: issuing it is `certificates.issuance`'s job.
    """
    if not leaves or any(leaf is None for leaf in leaves.values()):
        return None
    stored = {p: leaf for p, leaf in leaves.items() if leaf is not None}
    try:
        ca = certs_in(ca_pem)[0]
        trusted = {p: certs_in(leaf.ca_pem) for p, leaf in stored.items()}
    except (ValueError, IndexError):
        return None
    signed = {p: signed_by(leaf.pair.cert_pem, ca) for p, leaf in stored.items()}
    extra = any(set(t) - {ca} for t in trusted.values())
    if all(signed.values()) and not extra:
        return None
    revision = max(leaf.revision for leaf in stored.values()) + 1
    if not all(ca in t for t in trusted.values()):
        both = bundle(*(leaf.ca_pem for leaf in stored.values()), ca)
        return Rotation(TRUST, revision, "new CA: the members trust the old and the new CA, one restart at a time",
                        {p: (False, both) for p in stored})
    if not rolled:
        return Rotation(WAIT, revision - 1, "CA rotation: waiting for every member to run the current certificates")
    if not all(signed.values()):
        return Rotation(LEAVES, revision, "CA rotation: leaves re-issued from the new CA, one restart at a time",
                        {p: (True, leaf.ca_pem) for p, leaf in stored.items() if not signed[p]})
    return Rotation(DROP, revision, "CA rotation: the old CA is no longer trusted, one restart at a time",
                    {p: (False, ca) for p in stored})
