"""Sidecar footprint: RSS, unique memory and idle CPU of each sidecar process.

A settled three-member cluster with the settings the operator renders by default
(heartbeat Lease every 10 s, membership-clean every 30 s, member poll every 2 s, etcd's
own raft timings); nothing writes to it. etcd's own figures are listed next to them
for scale.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from tests.bench.labs import PRODUCT_DEFAULTS, grow
from tests.etcd.harness import Lab

COLUMNS = ("process", "rss_mib", "uss_mib", "cpu_idle_pct", "idle_s")
SETTLE_S = 5.0


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


async def bench(kubeconfig: str, workdir: Path, idle_s: float,
                log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    lab = Lab(kubeconfig, workdir, replicas=3, env_extra=PRODUCT_DEFAULTS)
    try:
        await grow(lab, 3)
        await asyncio.sleep(SETTLE_S)
        procs: dict[str, psutil.Process] = {}
        for ordinal in range(3):
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
    finally:
        lab.close()
        shutil.rmtree(workdir, ignore_errors=True)
