"""What every lifecycle shell shares: its base, the membership lock's name, what counts as retryable, backoff."""

from __future__ import annotations

from typing import TYPE_CHECKING

import aiohttp

from raftset.sidecar.io.etcdclient import EtcdClientError, TLSConfigError
from raftset.sidecar.io.kube import KubeError

if TYPE_CHECKING:
    from raftset.sidecar.agent import Agent

# One membership change at a time across the cluster's sidecars (an etcd lock).
LOCK_NAME = "raftset/membership"
# Everything a step may raise that means "try again later", not "crash".
RETRYABLE = (EtcdClientError, KubeError, aiohttp.ClientError, TLSConfigError, OSError, TimeoutError)
# What a Kubernetes API call may raise that a report (a label, an Event, a Lease) survives.
API_ERRORS = (KubeError, aiohttp.ClientError, TimeoutError)


class Shell:
    """One lifecycle step's shell (join, heartbeat, promote, clean, leave), with the agent's state at hand."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.settings = agent.settings
