"""Recovery time (RTO) of the bad days: lights-out and quorum loss, with real members.

Real etcd members and their real sidecars (the operator's default sidecar settings, etcd's
default raft timings), a writer running throughout (`tests.harness.checker.Writer`), and
the acknowledged-write checker at the end of every run, as in the etcd tier's tests
(`tests/etcd/test_lights_out.py`, `tests/etcd/test_quorum_loss.py`), whose steps these are:

  lights-out: every store and sidecar of a 3-member cluster is SIGKILLed at once with their
    data kept, then every pod starts at once (Parallel pod management). Timed from the
    power coming back.
  quorum loss: 2 of 3 members are lost with their volumes; the bench plays the operator's
    part (reads the survivor's heartbeat, records the recovery on the workload, restarts the
    survivor's pod, then the two lost pods one at a time on empty volumes). Timed from the
    recovery's start, the moment the operator records it (by policy or on request).

"writable" is the first put the writer gets acknowledged after that moment; "full" is every
member voting again.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.bench.labs import PRODUCT_DEFAULTS, grow
from tests.harness.checker import Writer, check
from tests.harness.lab import Lab
from tests.harness.quorum import end_recovery, frozen_revision, lose, lost_by_revision, record_recovery, survivors
from tests.harness.waiting import wait_for

SCENARIOS = ("lights-out", "quorum-loss")
COLUMNS = ("scenario", "members", "repetition", "acked_before", "rto_writable_s", "rto_full_s", "acked_lost",
           "acked_read_back", "same_member_ids", "load_1m")
WARM_WRITES = 100
TIMEOUT_S = 120.0


def _writer(lab: Lab, size: int) -> Writer:
    writer = Writer([lab.pod(o).client_url for o in range(size)], lab.client_tls())
    writer.start()
    wait_for(lambda: writer.ok > WARM_WRITES, 30, "the writer running")
    return writer


async def lights_out(lab: Lab) -> dict[str, Any]:
    await grow(lab, 3)
    ids = {m.name: m.id for m in await lab.members(0, 1, 2)}
    writer = _writer(lab, 3)
    try:
        for ordinal in range(3):  # the power goes: no hook, no hand-off, no grace
            lab.pod(ordinal).kill()
        acked_before = len(writer.acked)
        ok_at_power_on = writer.ok
        power_on = time.monotonic()
        for ordinal in range(3):  # every pod at once, none waits for another
            lab.pod(ordinal).start_sidecar()
        for ordinal in range(3):
            lab.pod(ordinal).wait_startup()
            lab.pod(ordinal).start_store()
        wait_for(lambda: writer.ok > ok_at_power_on, TIMEOUT_S, "a write acknowledged after the power came back")
        writable = time.monotonic()
        for ordinal in range(3):
            lab.pod(ordinal).wait_ready(TIMEOUT_S)
        await lab.wait_voting(3, TIMEOUT_S)
        full = time.monotonic()
    finally:
        writer.stop()
    same_ids = {m.name: m.id for m in await lab.members(0, 1, 2)} == ids
    verdict = await check([lab.pod(o).client_url for o in range(3)], writer.acked, lab.client_tls())
    return {"acked_before": acked_before, "rto_writable_s": round(writable - power_on, 2),
            "rto_full_s": round(full - power_on, 2), "acked_lost": 0, "acked_read_back": verdict.acknowledged,
            "same_member_ids": same_ids}


async def quorum_loss(lab: Lab) -> dict[str, Any]:
    await grow(lab, 3)
    writer = _writer(lab, 3)
    try:
        lose(lab, 1, 2)
        [survivor] = survivors(lab, 0)
        held = await frozen_revision(lab, 0)  # without quorum nothing more can be acknowledged
        acked_before = dict(writer.acked)
        lost = lost_by_revision(acked_before, held)
        record_recovery(lab, survivor)
        started = time.monotonic()
        ok_at_start = writer.ok
        pod = lab.pod(0)  # the operator restarts the survivor's pod; its sidecar starts it alone
        pod.kill()
        pod.start_sidecar()
        pod.wait_startup()
        pod.start_store()
        wait_for(lambda: writer.ok > ok_at_start, TIMEOUT_S, "writes accepted by the one-member cluster")
        writable = time.monotonic()
        for ordinal in (1, 2):  # the lost pods come back on empty volumes, one learner at a time
            lab.pod(ordinal).start(timeout=TIMEOUT_S)
            lab.pod(ordinal).wait_ready(TIMEOUT_S)
            await lab.wait_voting(ordinal + 1, TIMEOUT_S, *range(ordinal + 1))
        full = time.monotonic()
        end_recovery(lab)
    finally:
        writer.stop()
    kept = {k: a for k, a in writer.acked.items() if k not in lost}
    verdict = await check([lab.pod(o).client_url for o in range(3)], kept, lab.client_tls())
    return {"acked_before": len(acked_before), "rto_writable_s": round(writable - started, 2),
            "rto_full_s": round(full - started, 2), "acked_lost": len(lost), "acked_read_back": verdict.acknowledged,
            "same_member_ids": ""}


DRIVERS: dict[str, Callable[[Lab], Any]] = {SCENARIOS[0]: lights_out, SCENARIOS[1]: quorum_loss}


async def bench(kubeconfig: str, workdir: Path, repetitions: int, scenarios: Sequence[str] = SCENARIOS,
                log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    rows = []
    for repetition in range(repetitions):
        for scenario in scenarios:
            work = workdir / f"{scenario}-{repetition}"
            lab = Lab(kubeconfig, work, replicas=3, env_extra=PRODUCT_DEFAULTS)
            load_1m = os.getloadavg()[0]
            t = time.monotonic()
            try:
                measured = await DRIVERS[scenario](lab)
            finally:
                lab.close()
                shutil.rmtree(work, ignore_errors=True)
            row = {"scenario": scenario, "members": 3, "repetition": repetition, **measured,
                   "load_1m": round(load_1m, 2)}
            rows.append(row)
            log(f"  recovery {scenario} #{repetition}: writable {row['rto_writable_s']}s, full {row['rto_full_s']}s, "
                f"acknowledged lost {row['acked_lost']} of {row['acked_before']}, read back "
                f"{row['acked_read_back']} ({time.monotonic() - t:.0f}s)")
    return rows
