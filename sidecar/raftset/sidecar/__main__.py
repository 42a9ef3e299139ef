"""`python -m raftset.sidecar` / `raftset-sidecar`: run one member's sidecar."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import MutableMapping, Sequence

from raftset.sidecar.pure import config

# OpenSSL's variable naming the CA bundle a default SSL context loads (ssl.get_default_verify_paths()).
CA_FILE_VARIABLE = "SSL_CERT_FILE"


def import_aiohttp(environ: MutableMapping[str, str] = os.environ) -> None:
    """Import aiohttp without parsing the system CA bundle: about 2 MiB less resident.

    aiohttp makes two client SSL contexts when it is imported, and each parses every
    certificate of the bundle into memory. The sidecar never uses them: its one HTTPS client,
    the Kubernetes API's (kube.py), brings a context of its own with the cluster's CA. Without
    the bundle they still find a system root when they verify, by name in the hashed CA
    directory (SSL_CERT_DIR, untouched); the variable is put back at once, so every context
    made later (kube.py without a configured CA, boto3, etcdutl) sees the bundle as before.
    """
    saved = environ.get(CA_FILE_VARIABLE)
    environ[CA_FILE_VARIABLE] = os.devnull
    try:
        import aiohttp  # noqa: F401, PLC0415 - the import is the point
    finally:
        if saved is None:
            del environ[CA_FILE_VARIABLE]
        else:
            environ[CA_FILE_VARIABLE] = saved


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = config.parse(argv, os.environ)
    except config.SettingsError as exc:
        print(f"raftset-sidecar: configuration error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=getattr(logging, settings.log_level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    import_aiohttp()
    from raftset.sidecar.server import serve  # noqa: PLC0415 - it imports aiohttp: only after import_aiohttp()
    asyncio.run(serve(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
