"""Recovery time (RTO) of the bad days: lights-out and quorum loss, with real members.

Real etcd members and their real sidecars (the operator's default sidecar settings, etcd's
default raft timings), a writer running throughout (`tests.harness.checker.Writer`), and
the acknowledged-write checker at the end of every run, as in the etcd tier's tests
(`tests/etcd/test_lights_out.py`, `tests/etcd/test_quorum_loss.py`), whose steps these are:

  lights-out: every store and sidecar of a 3- (or 5-) member cluster is SIGKILLed at once with
    their data kept, then every pod starts at once (Parallel pod management). Timed from the
    power coming back.
  quorum loss: 2 of 3 (3 of 5) members are lost with their volumes; the bench plays the
    operator's part (reads the survivors' heartbeats, chooses the most up-to-date with the
    operator's own `choose`, records the recovery on the workload, restarts the survivors' pods,
    the chosen one first; then the lost pods one at a time on empty volumes). Timed from the
    recovery's start, the moment the operator records it (by policy or on request).

"writable" is the first put the writer gets acknowledged after that moment; "full" is every
member voting again.

Every member's peer port sits behind a real Toxiproxy proxy, as in the scale-in (a lost pod
comes back on its address, so behind its proxy). One cluster per size and repetition runs
every scenario at every latency: growing it is the fixed cost, and each run ends with the
cluster whole again (every member voting, the recovery record cleared), as the next run
starts. Between runs only the latency toxic changes (`tests.harness.toxiproxy.set_latency`);
each run has a writer and a checker of its own.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.bench.labs import PRODUCT_DEFAULTS, grow
from tests.bench.scalein import JITTER
from tests.harness.checker import Writer, check
from tests.harness.lab import Lab
from tests.harness.quorum import end_recovery, frozen_revision, lose, lost_by_revision, record_recovery, survivors
from tests.harness.toxiproxy import Toxiproxy, route_peers, set_latency
from tests.harness.waiting import wait_for
from raftset.quorum_loss import choose

SCENARIOS = ("lights-out", "quorum-loss")
COLUMNS = ("one_way_ms", "scenario", "members", "repetition", "acked_before", "rto_writable_s", "rto_full_s",
           "acked_lost", "acked_read_back", "same_member_ids", "load_1m")
WARM_WRITES = 100
TIMEOUT_S = 120.0


def _writer(lab: Lab, size: int) -> Writer:
    writer = Writer([lab.pod(o).client_url for o in range(size)], lab.client_tls())
    writer.start()
    wait_for(lambda: writer.ok > WARM_WRITES, 30, "the writer running")
    return writer


async def lights_out(lab: Lab, size: int) -> dict[str, Any]:
    members = range(size)
    ids = {m.name: m.id for m in await lab.members(*members)}
    writer = _writer(lab, size)
    try:
        for ordinal in members:  # the power goes: no hook, no hand-off, no grace
            lab.pod(ordinal).kill()
        acked_before = len(writer.acked)
        ok_at_power_on = writer.ok
        power_on = time.monotonic()
        for ordinal in members:  # every pod at once, none waits for another
            lab.pod(ordinal).start_sidecar()
        for ordinal in members:
            lab.pod(ordinal).wait_startup()
            lab.pod(ordinal).start_store()
        wait_for(lambda: writer.ok > ok_at_power_on, TIMEOUT_S, "a write acknowledged after the power came back")
        writable = time.monotonic()
        for ordinal in members:
            lab.pod(ordinal).wait_ready(TIMEOUT_S)
        await lab.wait_voting(size, TIMEOUT_S)
        full = time.monotonic()
    finally:
        writer.stop()
    same_ids = {m.name: m.id for m in await lab.members(*members)} == ids
    verdict = await check([lab.pod(o).client_url for o in members], writer.acked, lab.client_tls())
    return {"acked_before": acked_before, "rto_writable_s": round(writable - power_on, 2),
            "rto_full_s": round(full - power_on, 2), "acked_lost": 0, "acked_read_back": verdict.acknowledged,
            "same_member_ids": same_ids}


async def quorum_loss(lab: Lab, size: int) -> dict[str, Any]:
    """A majority lost for good: the survivors are the lowest ordinals (one of 3, two of 5), the
    operator's choice among them (the most up to date) restarts alone, the other survivor moves
    its data aside and joins as a learner, then the lost pods one at a time."""
    kept = range(size // 2)
    writer = _writer(lab, size)
    try:
        lose(lab, *range(size // 2, size))
        chosen = choose(survivors(lab, *kept))
        assert chosen is not None, "no survivor to recover from"
        seed = next(o for o in kept if lab.pod(o).name == chosen.pod)
        held = await frozen_revision(lab, seed)  # without quorum nothing more can be acknowledged
        acked_before = dict(writer.acked)
        lost = lost_by_revision(acked_before, held)
        record_recovery(lab, chosen)
        started = time.monotonic()
        ok_at_start = writer.ok
        for ordinal in kept:  # the operator restarts the survivors' pods; the chosen one starts alone
            lab.pod(ordinal).kill()
        for ordinal in (seed, *(o for o in kept if o != seed)):
            pod = lab.pod(ordinal)
            pod.start_sidecar()
            pod.wait_startup(TIMEOUT_S)
            pod.start_store()
            if ordinal == seed:
                wait_for(lambda: writer.ok > ok_at_start, TIMEOUT_S, "writes accepted by the one-member cluster")
                writable = time.monotonic()
            pod.wait_ready(TIMEOUT_S)
        for ordinal in range(size // 2, size):  # the lost pods come back on empty volumes, one learner at a time
            lab.pod(ordinal).start(timeout=TIMEOUT_S)
            lab.pod(ordinal).wait_ready(TIMEOUT_S)
            await lab.wait_voting(ordinal + 1, TIMEOUT_S, *range(ordinal + 1))
        full = time.monotonic()
        end_recovery(lab)
    finally:
        writer.stop()
    kept_writes = {k: a for k, a in writer.acked.items() if k not in lost}
    verdict = await check([lab.pod(o).client_url for o in range(size)], kept_writes, lab.client_tls())
    return {"acked_before": len(acked_before), "rto_writable_s": round(writable - started, 2),
            "rto_full_s": round(full - started, 2), "acked_lost": len(lost), "acked_read_back": verdict.acknowledged,
            "same_member_ids": ""}


DRIVERS: dict[str, Callable[[Lab, int], Any]] = {SCENARIOS[0]: lights_out, SCENARIOS[1]: quorum_loss}


async def bench(kubeconfig: str, workdir: Path, repetitions: int, scenarios: Sequence[str] = SCENARIOS,
                sizes: Sequence[int] = (3,), latencies_ms: Sequence[int] = (0,),
                log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Every scenario at every one-way peer latency, on one cluster per size and repetition."""
    rows = []
    for repetition in range(repetitions):
        for size in sizes:
            rows += await _cluster(kubeconfig, workdir / f"{size}-{repetition}", size, repetition, scenarios,
                                   latencies_ms, log)
    return rows


async def _cluster(kubeconfig: str, work: Path, size: int, repetition: int, scenarios: Sequence[str],
                   latencies_ms: Sequence[int], log: Callable[[str], None]) -> list[dict[str, Any]]:
    lab = Lab(kubeconfig, work, replicas=size, env_extra=PRODUCT_DEFAULTS)
    rows = []
    try:
        with Toxiproxy(work / "toxiproxy") as toxiproxy:
            route_peers(lab, toxiproxy, range(size))
            t = time.monotonic()
            await grow(lab, size)
            log(f"  recovery: {size} members grown in {time.monotonic() - t:.0f}s, once for every scenario and latency")
            for scenario in scenarios:
                for one_way_ms in latencies_ms:
                    set_latency(toxiproxy, one_way_ms, round(one_way_ms * JITTER))
                    rows.append(await _one(lab, scenario, size, repetition, one_way_ms, log))
    finally:
        lab.close()
        shutil.rmtree(work, ignore_errors=True)
    return rows


async def _one(lab: Lab, scenario: str, size: int, repetition: int, one_way_ms: int,
               log: Callable[[str], None]) -> dict[str, Any]:
    load_1m = os.getloadavg()[0]
    t = time.monotonic()
    measured = await DRIVERS[scenario](lab, size)
    row = {"one_way_ms": one_way_ms, "scenario": scenario, "members": size, "repetition": repetition, **measured,
           "load_1m": round(load_1m, 2)}
    log(f"  recovery {scenario} ({size} members, {one_way_ms} ms) #{repetition}: writable {row['rto_writable_s']}s, "
        f"full {row['rto_full_s']}s, acknowledged lost {row['acked_lost']} of {row['acked_before']}, "
        f"read back {row['acked_read_back']} ({time.monotonic() - t:.0f}s)")
    return row
