"""Rolling restarts and member replacement under load: the roll a StatefulSet does against raftset's, and a repair.

One 3-member cluster of real members (the default etcd build, etcd's default raft timings) and
their real sidecars per one-way peer latency, every peer port behind Toxiproxy as in the
scale-in, the scale-in's load (`tests.bench.load`) throughout. On that cluster, one after the
other, each step with the leader placed first:

  default order: what a plain StatefulSet RollingUpdate does: highest ordinal first down to 0,
     wherever the leader is. Each pod stops as a pod without a useful preStop: its sidecar is
     gone first (so its SIGTERM fallback hands nothing off), then the store gets kubelet's SIGTERM
     (SIGKILL after the grace period). The leader sits on demo-2, the ordinal this order restarts
     first, so it is restarted first and its successor may be restarted next. (etcd itself
     transfers leadership when it stops on SIGTERM as the leader: no election timeout, but a
     leader change per leader restarted.)
  leader last: raftset's roll (`tests.harness.scenarios.restart_in_place`): followers first,
     highest ordinal first, the leader last; its preStop keeps the member and hands leadership
     off. The leader sits on demo-2 again.
  replace: `raftset.dev/replace=true` on a pod (the store restarting as kubelet restarts it),
     the follower demo-2 with the leader on demo-0, then (where asked) the leader demo-0 itself,
     whose sidecar hands leadership off first. Timed from the annotation until the pod's new
     member votes.

Every pod of a roll comes back ready with all three voting before the next goes
(`back_in_place`), in both orders. Each step has the checker's writer of its own beside the
load and ends with the checker on all three members (`acked_read_back`).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from raftset import contract
from tests.bench.labs import engine_defaults, grow
from tests.bench.load import Load
from tests.bench.scalein import JITTER, KUBELET_GRACE_S, TAIL_S, error_kinds, member_ids, window_row
from tests.harness.checker import Writer, check
from tests.harness.engines import DEFAULT
from tests.harness.lab import Lab
from tests.harness.rot import cleared, kubelet_restarts, replaced
from tests.harness.scenarios import back_in_place, restart_in_place
from tests.harness.toxiproxy import Toxiproxy, route_peers
from tests.harness.waiting import await_for, wait_for

SIZE = 3
ORDERS = ("default", "leader-last")
TARGETS = ("follower", "leader")
ROLL_LEADER = SIZE - 1  # the ordinal a StatefulSet's roll restarts first
REPLACE_LEADER = 0
WINDOW = ("steady_writes_per_s", "steady_write_p99_ms", "writes", "failed_writes", "failed_write_requests",
          "longest_stall_s", "write_p50_ms", "write_p99_ms", "write_p999_ms", "failed_reads", "leader_changes")
COLUMNS = ("one_way_ms", "order", "repetition", *WINDOW, "restart_order", "leader_before", "leader_after", "roll_s",
           "acked_read_back", "load_1m", "write_errors")
REPLACE_COLUMNS = ("one_way_ms", "target", "repetition", *WINDOW, "replaced", "leader_before", "leader_after",
                   "replace_s", "acked_read_back", "load_1m", "write_errors")


def roll_order(order: str, leader: int, size: int = SIZE) -> list[int]:
    """The pods in the order a roll restarts them: a StatefulSet's (highest ordinal first) or raftset's
    (the same, the leader moved to the end)."""
    down = list(range(size - 1, -1, -1))
    return down if order == "default" else [*(o for o in down if o != leader), leader]


def replace_target(target: str) -> int:
    """The pod replaced: the leader, or the highest ordinal among the followers."""
    return REPLACE_LEADER if target == "leader" else SIZE - 1


def stop_without_prestop(lab: Lab, ordinal: int) -> None:
    """A pod of a plain StatefulSet stopping: no preStop and no sidecar, the store gets SIGTERM,
    SIGKILL after the grace period."""
    containers = lab.pod(ordinal).containers
    lab.delete_pod(ordinal)
    assert containers.sidecar is not None and containers.store is not None
    containers.supervisor.kill(containers.sidecar)
    containers.supervisor.stop(containers.store, grace_s=KUBELET_GRACE_S)
    lab.release_pod(ordinal)


async def restart_default(lab: Lab, ordinal: int) -> None:
    stop_without_prestop(lab, ordinal)
    await back_in_place(lab, ordinal, SIZE)


async def roll(lab: Lab, order: str) -> dict[str, Any]:
    leader = await lab.leader_ordinal()
    assert leader is not None, "no leader before the roll"
    pods = roll_order(order, leader)
    for ordinal in pods:
        if order == "default":
            await restart_default(lab, ordinal)
        else:
            await restart_in_place(lab, ordinal, SIZE)
    return {"order": order, "restart_order": " ".join(f"demo-{o}" for o in pods)}


async def replace(lab: Lab, target: str) -> dict[str, Any]:
    ordinal = replace_target(target)
    pod = lab.pod(ordinal)
    old = (await member_ids(lab, range(SIZE)))[ordinal]
    others = [o for o in range(SIZE) if o != ordinal]
    async with kubelet_restarts(pod):
        t0 = time.monotonic()
        lab.annotate_pod(ordinal, {contract.ANNOTATION_REPLACE: "true"})
        await await_for(replaced(lab, pod, old, *others), 120, f"{pod.name} voting as a new member")
        replace_s = time.monotonic() - t0
        await await_for(cleared(lab, ordinal), 30, "the replace record cleared")
        pod.wait_ready()
    return {"target": target, "replaced": pod.name, "replace_s": round(replace_s, 3)}


async def _step(lab: Lab, errors: list[str], place_leader: int, baseline_s: float,
                act: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """One step under the running load (`errors`: what its failed requests were told), with a checker's
    writer of its own: its row, window columns unfilled."""
    await lab.move_leader_to(place_leader, timeout=30)
    urls = [lab.pod(o).client_url for o in range(SIZE)]
    writer = Writer(urls)
    writer.start()
    try:
        wait_for(lambda: writer.ok > 20, 20, "the checker's writer running")
        steady_from = time.monotonic()
        await asyncio.sleep(baseline_s)
        before = await lab.leader_ordinal()
        load_1m = os.getloadavg()[0]
        t0 = time.monotonic()
        first_error = len(errors)
        row = await act
        done = time.monotonic()
        await lab.wait_voting(SIZE)
        await asyncio.sleep(TAIL_S + 0.5)
        after = await lab.leader_ordinal()
        told = errors[first_error:]
    finally:
        writer.stop()
    verdict = await check(urls, writer.acked)
    return {**row, "steady": (steady_from, t0), "window": (t0, done + TAIL_S), "roll_s": round(done - t0, 3),
            "leader_before": f"demo-{before}", "leader_after": f"demo-{after}" if after is not None else "",
            "acked_read_back": verdict.acknowledged, "load_1m": round(load_1m, 2),
            "write_errors": error_kinds(told, "put")}


async def run_once(kubeconfig: str, workdir: Path, one_way_ms: int, repetition: int, baseline_s: float,
                   targets: Sequence[str], log: Callable[[str], None] = print
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Both rolls, then each replacement in `targets`, on one cluster: (roll rows, replace rows)."""
    lab = Lab(kubeconfig, workdir, replicas=SIZE, env_extra=engine_defaults(DEFAULT))
    steps: list[dict[str, Any]] = []
    try:
        with Toxiproxy(workdir / "toxiproxy") as toxiproxy:
            route_peers(lab, toxiproxy, range(SIZE), one_way_ms, round(one_way_ms * JITTER))
            await grow(lab, SIZE)
            urls = [lab.pod(o).client_url for o in range(SIZE)]
            load = Load(urls, watch=urls)
            load.start()
            try:
                load.wait_writes(20)
                for order in ORDERS:
                    steps.append(await _step(lab, load.observed.errors, ROLL_LEADER, baseline_s, roll(lab, order)))
                    log(f"  roll {one_way_ms} ms {order}: {steps[-1]['restart_order']} in {steps[-1]['roll_s']}s")
                for target in targets:
                    steps.append(await _step(lab, load.observed.errors, REPLACE_LEADER, baseline_s,
                                             replace(lab, target)))
                    log(f"  replace {one_way_ms} ms {target}: votes after {steps[-1]['replace_s']}s")
            finally:
                observed = load.stop()
    finally:
        lab.close()
        shutil.rmtree(workdir, ignore_errors=True)
    rolled: list[dict[str, Any]] = []
    replaced_rows: list[dict[str, Any]] = []
    for step in steps:
        steady, window = step.pop("steady"), step.pop("window")
        row = {"one_way_ms": one_way_ms, "repetition": repetition, **step, **window_row(observed, steady, window)}
        if "target" in row:
            del row["roll_s"]
            replaced_rows.append(row)
        else:
            rolled.append(row)
    return rolled, replaced_rows


async def bench(kubeconfig: str, workdir: Path, latencies_ms: Sequence[int], repetitions: int, baseline_s: float,
                targets: Sequence[str] = TARGETS, log: Callable[[str], None] = print
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every latency x repetition: (roll rows, replace rows)."""
    rolled: list[dict[str, Any]] = []
    replaced_rows: list[dict[str, Any]] = []
    for one_way_ms in latencies_ms:
        for repetition in range(repetitions):
            t = time.monotonic()
            rows, more = await run_once(kubeconfig, workdir / f"rolls-{one_way_ms}ms-{repetition}", one_way_ms,
                                        repetition, baseline_s, targets, log)
            for row in rows + more:
                log(f"  row {json.dumps(row)}")
            rolled += rows
            replaced_rows += more
            log(f"  rolls and replacements at {one_way_ms} ms #{repetition}: {time.monotonic() - t:.0f}s")
    return rolled, replaced_rows
