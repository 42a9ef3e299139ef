"""The entry point's aiohttp import: the CA bundle variable is set for that import only."""

from __future__ import annotations

import os

import pytest

from raftset.sidecar.__main__ import CA_FILE_VARIABLE, import_aiohttp

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("before", [{}, {CA_FILE_VARIABLE: "/etc/ssl/certs/ca-certificates.crt"}])
def test_import_aiohttp_puts_the_ca_bundle_back(before: dict[str, str]) -> None:
    environ = {"PATH": "/usr/bin", **before}
    import_aiohttp(environ)
    assert environ == {"PATH": "/usr/bin", **before}


def test_import_aiohttp_imports_it_without_the_bundle() -> None:
    seen: dict[str, str] = {}

    class Watching(dict[str, str]):
        def __setitem__(self, key: str, value: str) -> None:
            seen[key] = value
            super().__setitem__(key, value)

    import_aiohttp(Watching())
    assert seen == {CA_FILE_VARIABLE: os.devnull}
