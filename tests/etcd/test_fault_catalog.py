"""The fault catalog's lab faults under recorded traffic: each is injected in the middle of a run,
and the run ends with the linearizability verdict, the watch checks and the acknowledged-write
checker."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tests.harness import faults
from tests.harness.checker import Writer
from tests.harness.lab import Lab
from tests.harness.scenarios import check_members, grow
from tests.harness.traffic import Traffic, lincheck

pytestmark = pytest.mark.etcd

# fault -> (how to inject it given the leader's ordinal, whether it costs the cluster its leader,
# whether clients feel it)
FAULTS: dict[str, tuple[Callable[[Lab, int], AbstractContextManager[None]], bool, bool]] = {
    "leader-killed": (lambda lab, leader: faults.store_killed(lab, leader), True, True),
    "follower-killed": (lambda lab, leader: faults.store_killed(lab, (leader + 1) % 3), False, True),
    "leader-paused": (lambda lab, leader: faults.store_paused(lab, leader, at_least=2.0), True, True),
    "leader-sidecar-killed": (lambda lab, leader: faults.sidecar_killed(lab, leader), False, False),
    "leader-leases-refused": (lambda lab, leader: faults.leases_refused(lab, leader), False, False),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_traffic_through_a_fault_stays_linearizable(make_lab, tmp_path: Path, fault: str) -> None:
    inject, costs_leader, felt = FAULTS[fault]
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    leader = await lab.leader_ordinal()
    assert leader is not None
    term = (await lab.status(leader)).raft_term
    processes = {o: (lab.pod(o).store, lab.pod(o).sidecar) for o in range(3)}
    endpoints = [lab.pod(o).client_url for o in range(3)]
    traffic = Traffic(endpoints, watchers=3, timeout=1.0, tls=lab.client_tls())  # a watcher per member
    writer = Writer(endpoints, lab.client_tls(), timeout=1.0, deadline=10.0)
    traffic.start()
    writer.start()
    try:
        assert traffic.started_clients.wait(10), traffic.errors[-3:]
        time.sleep(1.0)
        with inject(lab, leader):
            time.sleep(2.0)
        for o in range(3):
            lab.pod(o).wait_ready()
        time.sleep(1.0)
    finally:
        traffic.stop()
        writer.stop()
    ops = traffic.history
    print(f"{fault}: {len(ops)} operations, {sum(op.unknown for op in ops)} unknown, "
          f"{len(traffic.errors)} errors, e.g. {traffic.errors[:2]}")
    if felt:
        assert traffic.errors, "the fault was felt: some calls failed"
    restarted = {o for o in range(3) if (lab.pod(o).store, lab.pod(o).sidecar) != processes[o]}
    assert restarted == ({leader} if "killed" in fault and fault.startswith("leader")
                         else {(leader + 1) % 3} if fault == "follower-killed" else set()), restarted
    if costs_leader:
        assert max([(await lab.status(o)).raft_term for o in range(3)]) > term, "a new leader was elected"
    verdict = lincheck(ops, tmp_path / f"{fault}.html")
    assert verdict.linearizable, verdict.summary
    assert traffic.watch_problems() == []
    await check_members(lab, writer, 0, 1, 2)
