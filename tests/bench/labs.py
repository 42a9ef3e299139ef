"""What every benchmark's etcd cluster shares: its settings and how it grows."""

from __future__ import annotations

from tests.harness.lab import Lab

# etcd's own defaults (heartbeat 100 ms, election 1000 ms), not the etcd tier's fast ones:
# an unplanned leader loss should cost what it costs a user.
ETCD_DEFAULTS = {"RAFTSET_OPTIONS": "{}"}
# What the operator renders when the CRD leaves `spec.sidecar` at its defaults (the poll
# interval and leave timeout are the sidecar's own defaults).
PRODUCT_DEFAULTS = {
    **ETCD_DEFAULTS,
    "RAFTSET_HEARTBEAT_INTERVAL": "10",
    "RAFTSET_CLEAN_INTERVAL": "30",
    "RAFTSET_CLEAN_GRACE": "300",
    "RAFTSET_POLL_INTERVAL": "2",
    "RAFTSET_LEAVE_TIMEOUT": "45",
}


async def grow(lab: Lab, size: int) -> None:
    """OrderedReady: each pod starts once the one before it is ready."""
    for ordinal in range(size):
        pod = lab.pod(ordinal)
        pod.start(timeout=60)
        pod.wait_ready(timeout=60)
    await lab.wait_voting(size, 60)
