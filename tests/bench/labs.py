"""What every benchmark's cluster shares: its settings and how it grows."""

from __future__ import annotations

import json

from tests.harness import scenarios
from tests.harness.engines import EngineUnderTest
from tests.harness.lab import Lab
from tools.devcluster import kubelet

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


def engine_defaults(build: EngineUnderTest) -> dict[str, str]:
    """The engine's own raft timings, as ETCD_DEFAULTS: only what loopback needs (Xline's metrics pushed)."""
    return {"RAFTSET_OPTIONS": json.dumps(kubelet.LOOPBACK_OPTIONS.get(build.engine.name, {}))}


async def grow(lab: Lab, size: int) -> None:
    """OrderedReady: each pod starts once the one before it is ready; an engine whose members
    cannot bootstrap alone (Xline) starts them together, as the tiers do."""
    if not lab.engine.engine.capabilities.bootstrap_alone:
        await scenarios.grow(lab, size)
        return
    for ordinal in range(size):
        pod = lab.pod(ordinal)
        pod.start(timeout=60)
        pod.wait_ready(timeout=60)
    await lab.wait_voting(size, 60)
