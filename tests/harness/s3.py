"""A real S3-compatible server (versitygw, posix backend) for the etcd and e2e tiers.

`s3_server` (session scope, in tests/conftest.py) starts one on a random 127.x address; each
test makes its own bucket with `fresh_bucket`. A versitygw that cannot be built or started
fails the tests that use it: backup tests never skip.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tools.devcluster import s3


@contextmanager
def server(workdir: Path) -> Iterator[s3.S3Server]:
    try:
        started = s3.start(workdir)
    except Exception as exc:  # noqa: BLE001 - a missing component fails, never skips
        pytest.fail(f"versitygw could not be built or started: {exc}")
    try:
        yield started
    finally:
        started.stop()


def fresh_bucket(server: s3.S3Server) -> str:
    name = f"raftset-{secrets.token_hex(4)}"
    server.create_bucket(name)
    return name
