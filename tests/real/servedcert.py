"""Which certificate each member serves, asked inside a lab node's namespace (the members' DNS names
resolve only there): `python -m tests.real.servedcert '<json>'` with `urls` (https://host:port) and
`tls_dir` (ca.crt, tls.crt, tls.key: a client the members accept), prints one JSON line
{url: sha256 of the served certificate's DER}. The handshake verifies the chain to ca.crt."""

from __future__ import annotations

import hashlib
import json
import socket
import ssl
import sys
from pathlib import Path
from urllib.parse import urlsplit


def served(url: str, tls_dir: Path) -> str:
    context = ssl.create_default_context(cafile=str(tls_dir / "ca.crt"))
    context.load_cert_chain(str(tls_dir / "tls.crt"), str(tls_dir / "tls.key"))
    where = urlsplit(url)
    with socket.create_connection((where.hostname, where.port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=where.hostname) as conn:
            return hashlib.sha256(conn.getpeercert(binary_form=True)).hexdigest()


def main() -> None:
    args = json.loads(sys.argv[1])
    print(json.dumps({url: served(url, Path(args["tls_dir"])) for url in args["urls"]}))


if __name__ == "__main__":
    main()
