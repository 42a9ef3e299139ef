"""What every lifecycle shell shares: its base, the membership lock's name, what counts as retryable, backoff."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import aiohttp

from raftset.sidecar.io.etcdclient import EtcdClientError, TLSConfigError
from raftset.sidecar.kube import KubeError

if TYPE_CHECKING:
    from raftset.sidecar.agent import Agent

# One membership change at a time across the cluster's sidecars (an etcd lock).
LOCK_NAME = "raftset/membership"
# Everything a step may raise that means "try again later", not "crash".
RETRYABLE = (EtcdClientError, KubeError, aiohttp.ClientError, TLSConfigError, OSError, TimeoutError)
# What a Kubernetes API call may raise that a report (a label, an Event, a Lease) survives.
API_ERRORS = (KubeError, aiohttp.ClientError, TimeoutError)


class Backoff:
    """Capped exponential backoff with a little jitter, so peers do not retry in step."""

    def __init__(self, initial: float = 0.5, cap: float = 10.0) -> None:
        self.initial, self.cap = initial, cap
        self.current = initial

    def next(self) -> float:
        delay = self.current
        self.current = min(self.current * 2, self.cap)
        return delay * random.uniform(0.8, 1.2)

    def reset(self) -> None:
        self.current = self.initial


class Shell:
    """One lifecycle step's shell (join, heartbeat, promote, clean, leave), with the agent's state at hand."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.settings = agent.settings
