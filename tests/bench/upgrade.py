"""An upgrade under load: a 3-member etcd cluster rolled one minor at a time, 3.5 -> 3.6 -> 3.7.

Each roll restarts one member at a time on the next build with its data, the way the
operator's roll does (`tests.harness.scenarios.restart_in_place`: the preStop keeps the
member, a leader hands leadership off first; the pod comes back ready and every member votes
before the next goes): followers first, highest ordinal first, the leader last. The
scale-in's load runs throughout (its columns, per roll, against the stretch just before it),
with the checker's writer beside it: after the last roll every write it got acknowledged
reads back and HashKV agrees on all three members.

etcd 3.7 cannot apply the v2 entries 3.5 left in the WAL: a low snapshot-count takes a raft
snapshot on 3.6 past them (docs/engines.md, "Upgrading a cluster that ran 3.5"). Before the
next roll, every member serves the new build and the cluster version has moved to it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.bench.labs import grow
from tests.bench.load import Load
from tests.bench.rolls import roll_order
from tests.bench.scalein import TAIL_S, member_ids, window_row
from tests.harness.checker import Writer, check
from tests.harness.engines import EngineUnderTest, ready
from tests.harness.lab import Lab, http_get
from tests.harness.scenarios import restart_in_place
from tests.harness.toxiproxy import Toxiproxy, route_peers
from tests.harness.waiting import wait_for

COLUMNS = ("from_version", "to_version", "restart_order", "steady_writes_per_s", "steady_write_p99_ms", "writes",
           "failed_writes", "failed_write_requests", "longest_stall_s", "write_p50_ms", "write_p99_ms",
           "write_p999_ms", "failed_reads", "leader_changes", "leader_before", "handed_off_to", "leader_after",
           "member_ids_unchanged", "roll_s", "acked_read_back", "load_1m")
SNAPSHOT_COUNT = "100"
SETTLE_WRITES = 400  # the checker writer's puts after a roll: several snapshots' worth


def _minor(version: str) -> list[str]:
    return version.split(".")[:2]


def _serving(lab: Lab, version: str) -> bool:
    """Every member's server is `version` and the cluster version has moved to its minor (etcd's /version)."""
    for ordinal in range(3):
        status, body = http_get(f"{lab.pod(ordinal).client_url}/version")
        seen = json.loads(body) if status == 200 else {}
        if seen.get("etcdserver") != version or _minor(seen.get("etcdcluster", "")) != _minor(version):
            return False
    return True


async def measure(kubeconfig: str, workdir: Path, path: Sequence[EngineUnderTest], baseline_s: float,
                  log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """One row per roll along `path` (oldest build first)."""
    for build in path:
        ready(build)
    first, *later = path
    lab = Lab(kubeconfig, workdir, replicas=3, engine=first,
              env_extra={"RAFTSET_OPTIONS": json.dumps({"snapshot-count": SNAPSHOT_COUNT})})
    rolls: list[dict[str, Any]] = []
    try:
        with Toxiproxy(workdir / "toxiproxy") as toxiproxy:
            route_peers(lab, toxiproxy, range(3))
            await grow(lab, 3)
            ids = await member_ids(lab, range(3))
            names = {f"{member:x}": f"demo-{ordinal}" for ordinal, member in ids.items()}  # /leave names the ID
            urls = [lab.pod(o).client_url for o in range(3)]
            load = Load(urls, watch=urls)
            writer = Writer(urls)
            load.start()
            writer.start()
            try:
                load.wait_writes(20)
                previous = first
                for build in later:
                    steady_from = time.monotonic()
                    await asyncio.sleep(baseline_s)
                    leader = await lab.leader_ordinal()
                    assert leader is not None, "no leader before the roll"
                    order = roll_order("leader-last", leader)
                    t0 = time.monotonic()
                    load_1m = os.getloadavg()[0]
                    for ordinal in order:
                        lab.pod(ordinal).build = build
                        left = await restart_in_place(lab, ordinal)  # the last: the leader's /leave
                    done = time.monotonic()
                    after = await lab.leader_ordinal()
                    acked = writer.ok
                    wait_for(lambda v=build.version: _serving(lab, v), 60,
                             f"every member and the cluster on {build.version}")
                    wait_for(lambda n=acked: writer.ok > n + SETTLE_WRITES, 60, "a few snapshots' worth of writes")
                    rolls.append({
                        "from_version": previous.version, "to_version": build.version,
                        "restart_order": " ".join(f"demo-{o}" for o in order), "t0": t0, "steady_from": steady_from,
                        "done": done, "leader_before": f"demo-{leader}",
                        "handed_off_to": names.get(left.get("moved_leader_to") or "", ""),
                        "leader_after": f"demo-{after}" if after is not None else "",
                        "member_ids_unchanged": await member_ids(lab, range(3)) == ids,
                        "roll_s": round(done - t0, 3), "load_1m": round(load_1m, 2),
                    })
                    log(f"  upgrade {previous.version} -> {build.version}: rolled {rolls[-1]['restart_order']} "
                        f"in {done - t0:.1f}s")
                    previous = build
            finally:
                observed = load.stop()
                writer.stop()
            verdict = await check(urls, writer.acked)
    finally:
        lab.close()
        shutil.rmtree(workdir, ignore_errors=True)
    rows = []
    for roll in rolls:
        t0, steady_from, done = roll.pop("t0"), roll.pop("steady_from"), roll.pop("done")
        rows.append({**roll, **window_row(observed, (steady_from, t0), (t0, done + TAIL_S)),
                     "acked_read_back": verdict.acknowledged})
    return rows
