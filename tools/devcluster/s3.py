"""A real S3-compatible server on loopback: versitygw with its posix backend.

Used by the backup/restore tests and by `make run`:

    from tools.devcluster import s3
    with s3.serve(workdir) as server:      # builds versitygw first if the cache lacks it
        server.endpoint, server.access_key, server.secret_key
        server.create_bucket("backups")

The server stores objects as plain files under `root`, so a test can also look at (or
corrupt) what a backup wrote. It is started in its own process group and stopped by pid.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.devcluster import build, net, procs


@dataclass
class S3Server:
    host: str
    port: int
    root: Path  # the posix backend's directory: one sub-directory per bucket
    access_key: str
    secret_key: str
    supervisor: procs.Supervisor
    proc: procs.Proc

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self) -> Any:
        """A boto3 client with the root credentials (path-style, as raftset's own)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                          response_checksum_validation="when_required"))

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def object_path(self, bucket: str, key: str) -> Path:
        return self.root / bucket / key

    def alive(self) -> bool:
        return self.proc.alive()

    def stop(self) -> None:
        self.supervisor.stop(self.proc)

    def log_tail(self, lines: int = 30) -> str:
        return self.proc.tail(lines)


def binary() -> Path:
    """The cached versitygw, built from the Go module proxy when missing (cold times: docs/devcluster.md)."""
    build.ensure(build.VERSITYGW, log=lambda _msg: None)
    return build.VERSITYGW.binary("versitygw")


def _listening(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def start(workdir: Path, *, host: str | None = None, port: int | None = None,
          access_key: str | None = None, secret_key: str | None = None) -> S3Server:
    """Start versitygw on `host:port` (a random 127.x address by default) serving `workdir/root`."""
    exe = binary()
    host = host or net.pick_block().host
    port = port or net.free_port(host)
    root = workdir / "root"
    root.mkdir(parents=True, exist_ok=True)
    (workdir / "logs").mkdir(exist_ok=True)
    access_key = access_key or f"raftset{secrets.token_hex(4)}"
    secret_key = secret_key or secrets.token_hex(16)
    supervisor = procs.Supervisor(workdir / "logs")
    # Credentials through the environment, not argv, so they do not show in `ps`.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGW_", "ROOT_"))}
    env.update(ROOT_ACCESS_KEY=access_key, ROOT_SECRET_KEY=secret_key)
    proc = supervisor.start("versitygw", [str(exe), "--port", f"{host}:{port}", "posix", str(root)], env=env)
    server = S3Server(host, port, root, access_key, secret_key, supervisor, proc)
    try:
        procs.wait_for(lambda: _listening(host, port), f"versitygw on {host}:{port}", 30, [proc])
    except BaseException:
        supervisor.stop(proc)
        raise
    return server


@contextmanager
def serve(workdir: Path, **kwargs: str | int | None) -> Iterator[S3Server]:
    server = start(workdir, **kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()
