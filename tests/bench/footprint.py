"""Sidecar footprint: RSS, unique memory and idle CPU of each sidecar process.

Measured on the scale-out benchmark's cluster before it grows: three members with the
settings the operator renders by default (heartbeat Lease every 10 s, membership-clean
every 30 s, member poll every 2 s, etcd's own raft timings); nothing writes to it.
etcd's own figures are listed next to them for scale.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import psutil

from tests.harness.lab import Lab

COLUMNS = ("process", "rss_mib", "uss_mib", "cpu_idle_pct", "idle_s")
SETTLE_S = 5.0


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


async def measure(lab: Lab, idle_s: float, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Each sidecar's and etcd's RSS, USS and CPU while `lab` (grown, idle) sits for `idle_s`."""
    await asyncio.sleep(min(SETTLE_S, idle_s))  # the joins' tail (Lease writes, promotion)
    procs: dict[str, psutil.Process] = {}
    for ordinal in sorted(lab.pods):
        pod = lab.pod(ordinal)
        assert pod.sidecar is not None and pod.store is not None
        procs[f"sidecar {pod.name}"] = psutil.Process(pod.sidecar.pid)
        procs[f"etcd {pod.name}"] = psutil.Process(pod.store.pid)
    before = {name: _cpu(p) for name, p in procs.items()}
    t0 = time.monotonic()
    await asyncio.sleep(idle_s)
    elapsed = time.monotonic() - t0
    rows = []
    for name, p in procs.items():
        memory = p.memory_full_info()
        rows.append({"process": name, "rss_mib": round(memory.rss / 2**20, 1),
                     "uss_mib": round(memory.uss / 2**20, 1),
                     "cpu_idle_pct": round((_cpu(p) - before[name]) / elapsed * 100, 2),
                     "idle_s": round(elapsed, 1)})
        log(f"  footprint {name}: RSS {rows[-1]['rss_mib']} MiB, USS {rows[-1]['uss_mib']} MiB, "
            f"CPU {rows[-1]['cpu_idle_pct']}% of a core")
    return rows
