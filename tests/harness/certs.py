"""Certificate files for a TLS member, issued by the operator's `auto` provider code.

The CA and the three leaves come from `raftset.operator.pure.certificates` exactly as the
operator issues them; the only addition is the members' loopback addresses as IP SANs,
because here members are dialled by address rather than by their pods' DNS names.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from pathlib import Path

from raftset.operator.pure import certificates

CLUSTER, NAMESPACE = "demo", "default"
# The mounted file stem of each leaf, as the operator's projected volume names them.
STEMS = {certificates.SERVER: "server", certificates.PEER: "peer", certificates.CLIENT: "client"}


def write_tls_dir(out: Path, ips: list[str]) -> Path:
    """ca.crt and server/peer/client pairs (engines.TLSFiles names) for members on `ips`."""
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.now(timezone.utc)
    ca = certificates.build_ca(f"{CLUSTER}-ca", now)
    (out / "ca.crt").write_bytes(ca.cert_pem)
    for purpose, spec in certificates.leaf_specs(CLUSTER, NAMESPACE, len(ips)).items():
        if spec.server_auth:
            spec = dataclasses.replace(spec, ip_addresses=(*spec.ip_addresses, *ips))
        pair = certificates.issue(ca, spec, now)
        (out / f"{STEMS[purpose]}.crt").write_bytes(pair.cert_pem)
        (out / f"{STEMS[purpose]}.key").write_bytes(pair.key_pem)
    return out
