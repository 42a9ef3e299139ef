"""Pure renderers for the `cert-manager` TLS provider.

cert-manager issues the same three Secrets the `auto` provider writes (same names, same
keys, same SANs from `certificates.leaf_specs`), so the pod template does not care who
made them. Without a user `issuerRef` the operator builds the usual CA chain: a
self-signed Issuer signs a CA Certificate, and an Issuer backed by that CA signs the leaves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raftset.operator.pure import certificates
from raftset.operator.pure.objects import metadata
from raftset.operator.pure.spec import Cluster

API_VERSION = "cert-manager.io/v1"
GROUP = "cert-manager.io"
# cert-manager renews at notAfter - renewBefore; the auto provider uses the same numbers.
LEAF_DURATION = f"{int(certificates.LEAF_LIFETIME.total_seconds()) // 3600}h"
RENEW_BEFORE = f"{int(certificates.RENEW_BEFORE.total_seconds()) // 3600}h"
CA_DURATION = f"{int(certificates.CA_LIFETIME.total_seconds()) // 3600}h"
PRIVATE_KEY = {"algorithm": "ECDSA", "size": 256, "encoding": "PKCS8", "rotationPolicy": "Always"}


def self_signed_issuer_name(cluster: Cluster) -> str:
    return f"{cluster.name}-selfsigned"


def ca_issuer_name(cluster: Cluster) -> str:
    return f"{cluster.name}-ca"


def issuer_ref(cluster: Cluster) -> dict[str, str]:
    """The user's issuer, or the CA Issuer the operator creates."""
    if cluster.issuer_ref:
        ref = dict(cluster.issuer_ref)
        return {"name": ref["name"], "kind": ref.get("kind") or "Issuer",
                "group": ref.get("group") or GROUP}
    return {"name": ca_issuer_name(cluster), "kind": "Issuer", "group": GROUP}


def _usages(leaf: certificates.LeafSpec) -> list[str]:
    usages = ["digital signature"]
    if leaf.server_auth:
        usages.append("server auth")
    if leaf.client_auth:
        usages.append("client auth")
    return usages


def _object(cluster: Cluster, kind: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind,
            "metadata": metadata(cluster, name, "tls"), "spec": dict(spec)}


def leaf_certificate(cluster: Cluster, leaf: certificates.LeafSpec) -> dict[str, Any]:
    name = certificates.secret_name(cluster.name, leaf.purpose)
    spec: dict[str, Any] = {
        "secretName": name,
        # The Secret carries the cluster's labels, so `kubectl get secret -l` finds it.
        "secretTemplate": {"labels": metadata(cluster, name, "tls")["labels"]},
        "commonName": leaf.common_name,
        "duration": LEAF_DURATION,
        "renewBefore": RENEW_BEFORE,
        "privateKey": dict(PRIVATE_KEY),
        "usages": _usages(leaf),
        "issuerRef": issuer_ref(cluster),
    }
    if leaf.dns_names:
        spec["dnsNames"] = list(leaf.dns_names)
    if leaf.ip_addresses:
        spec["ipAddresses"] = list(leaf.ip_addresses)
    return _object(cluster, "Certificate", name, spec)


def ca_chain(cluster: Cluster) -> list[dict[str, Any]]:
    """Self-signed Issuer -> CA Certificate (Secret `<name>-ca`) -> CA Issuer."""
    ca_secret = certificates.ca_secret_name(cluster.name)
    return [
        _object(cluster, "Issuer", self_signed_issuer_name(cluster), {"selfSigned": {}}),
        _object(cluster, "Certificate", ca_secret, {
            "isCA": True,
            "commonName": f"{cluster.name}-ca",
            "secretName": ca_secret,
            "secretTemplate": {"labels": metadata(cluster, ca_secret, "tls")["labels"]},
            "duration": CA_DURATION,
            "privateKey": {"algorithm": "ECDSA", "size": 256, "encoding": "PKCS8"},
            "issuerRef": {"name": self_signed_issuer_name(cluster), "kind": "Issuer", "group": GROUP},
        }),
        _object(cluster, "Issuer", ca_issuer_name(cluster), {"ca": {"secretName": ca_secret}}),
    ]


def objects(cluster: Cluster) -> list[dict[str, Any]]:
    """Everything the operator applies for cert-manager, issuers before certificates."""
    chain = [] if cluster.issuer_ref else ca_chain(cluster)
    leaves = certificates.leaf_specs(cluster.name, cluster.namespace, cluster.replicas)
    return [*chain, *(leaf_certificate(cluster, leaf) for leaf in leaves.values())]


def revision(certificates_found: Mapping[str, Mapping[str, Any] | None]) -> str:
    """The pod template's TLS revision: moves when cert-manager re-issues a leaf.

    A Certificate not issued yet counts as revision 1, so the first issue (pods not yet
    started) does not roll the workload, and each renewal does.
    """
    parts = []
    for purpose in certificates.PURPOSES:
        found = certificates_found.get(purpose) or {}
        parts.append(str(int((found.get("status") or {}).get("revision") or 1)))
    return ".".join(parts)
