"""What every lifecycle shell shares: the membership lock's name, what counts as retryable, error reports."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp

from raftset.sidecar.io.etcdclient import EtcdClientError, TLSConfigError
from raftset.sidecar.io.kube import KubeError
from raftset.sidecar.pure.state import State

log = logging.getLogger("raftset.sidecar")

# One membership change at a time across the cluster's sidecars (an etcd lock).
LOCK_NAME = "raftset/membership"
# Everything a round may raise that means "try again later", not "crash".
RETRYABLE = (EtcdClientError, KubeError, aiohttp.ClientError, TLSConfigError, OSError, TimeoutError)
# What a Kubernetes API call may raise that a report (a label, an Event, a Lease) survives.
API_ERRORS = (KubeError, aiohttp.ClientError, TimeoutError)


def report(state: State, where: str, exc: BaseException) -> None:
    """An error shown on /startup and /readyz, logged once per distinct message."""
    message = f"{where}: {exc}"
    if isinstance(exc, TLSConfigError):
        message = f"{where}: bad TLS material: {exc}"
    if message != state.last_error:
        log.error("%s", message)
    else:
        log.debug("%s (again)", message)
    state.last_error = message


async def sleep(stopping: asyncio.Event, seconds: float) -> bool:
    """Sleep unless stopping; True if the sidecar is stopping."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), timeout=seconds)
    return stopping.is_set()
