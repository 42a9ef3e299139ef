"""The fault catalog's lab faults under recorded traffic: each is injected in the middle of a run,
and the run ends with the linearizability verdict, the watch checks and the acknowledged-write
checker."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness import faults
from tools.devcluster import podfaults
from tests.harness.checker import Writer
from tests.harness.lab import Lab, wait_for
from tests.harness.scenarios import check_members, grow
from tests.harness.traffic import Traffic, lincheck

pytestmark = pytest.mark.etcd

@dataclass(frozen=True)
class Fault:
    # given the lab, the leader's ordinal and what `prepare` gave
    inject: Callable[[Lab, int, Any], AbstractContextManager[None]]
    costs_leader: bool = False  # a new leader must be elected
    felt: bool = True  # some client calls fail
    restarts: Callable[[int], set[int]] = lambda leader: set()  # the ordinals whose processes are replaced
    prepare: Callable[[Lab], AbstractContextManager[Any]] = lambda lab: nullcontext()  # held around it all


def skew_seen(lab: Lab, ordinal: int, seconds: int) -> bool:
    """The sidecar's heartbeat is stamped by its skewed clock."""
    return podfaults.stamped_ahead(lab.pod(ordinal).heartbeat()) > seconds / 2


@contextmanager
def skewed_and_seen(lab: Lab, ordinal: int, seconds: int) -> Iterator[None]:
    with faults.clock_skewed(lab, ordinal, seconds):
        wait_for(lambda: skew_seen(lab, ordinal, seconds), 20, "the skewed clock in the sidecar's heartbeat")
        yield


@contextmanager
def full_and_crashed(lab: Lab, ordinal: int) -> Iterator[None]:
    """etcd exits when bbolt cannot grow its file ("failed to commit tx": no space left on device)."""
    with faults.volume_full(lab, ordinal):
        store = lab.pod(ordinal).containers.store
        assert store is not None
        wait_for(lambda: not store.alive(), 30, "the store to exit on its full volume")
        yield


FAULTS = {
    "leader-killed": Fault(lambda lab, leader, _: faults.store_killed(lab, leader), costs_leader=True,
                           restarts=lambda leader: {leader}),
    "follower-killed": Fault(lambda lab, leader, _: faults.store_killed(lab, (leader + 1) % 3),
                             restarts=lambda leader: {(leader + 1) % 3}),
    "leader-paused": Fault(lambda lab, leader, _: faults.store_paused(lab, leader, at_least=2.0), costs_leader=True),
    "leader-sidecar-killed": Fault(lambda lab, leader, _: faults.sidecar_killed(lab, leader), felt=False,
                                   restarts=lambda leader: {leader}),
    "leader-leases-refused": Fault(lambda lab, leader, _: faults.leases_refused(lab, leader), felt=False),
    "leader-clock-skewed": Fault(lambda lab, leader, _: skewed_and_seen(lab, leader, 120), felt=False,
                                 prepare=lambda lab: nullcontext(faults.skewable_clocks(lab, range(3)))),
    "follower-cut-off-from-leader": Fault(lambda lab, leader, proxy: faults.cut_off(proxy, (leader + 1) % 3, leader),
                                          prepare=lambda lab: faults.peers_proxied(lab, range(3))),
    "follower-volume-full": Fault(lambda lab, leader, _: full_and_crashed(lab, (leader + 1) % 3),
                                  restarts=lambda leader: {(leader + 1) % 3},
                                  prepare=lambda lab: faults.small_volumes(lab, range(3), 200)),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_traffic_through_a_fault_stays_linearizable(make_lab, tmp_path: Path, fault: str) -> None:
    chosen = FAULTS[fault]
    lab = make_lab(replicas=3)
    with chosen.prepare(lab) as prepared:
        await run_through(lab, tmp_path, fault, chosen, prepared)


async def run_through(lab: Lab, tmp_path: Path, fault: str, chosen: Fault, prepared: Any) -> None:
    await grow(lab, 3)
    leader = await lab.leader_ordinal()
    assert leader is not None
    term = (await lab.status(leader)).raft_term
    processes = {o: (lab.pod(o).store, lab.pod(o).sidecar) for o in range(3)}
    members = {m.id for m in await lab.members(leader)}
    endpoints = [lab.pod(o).client_url for o in range(3)]
    traffic = Traffic(endpoints, watchers=3, timeout=1.0, tls=lab.client_tls())  # a watcher per member
    writer = Writer(endpoints, lab.client_tls(), timeout=1.0, deadline=10.0)
    traffic.start()
    writer.start()
    try:
        assert traffic.started_clients.wait(10), traffic.errors[-3:]
        time.sleep(1.0)
        with chosen.inject(lab, leader, prepared):
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
    if chosen.felt:
        assert traffic.errors, "the fault was felt: some calls failed"
    restarted = {o for o in range(3) if (lab.pod(o).store, lab.pod(o).sidecar) != processes[o]}
    assert restarted == chosen.restarts(leader), restarted
    if chosen.costs_leader:
        assert max([(await lab.status(o)).raft_term for o in range(3)]) > term, "a new leader was elected"
    assert {m.id for m in await lab.members(leader)} == members, "every member kept its identity"
    checked = traffic.settled(ops)
    print(f"{fault}: {len(ops) - len(checked)} writes of unknown outcome settled as not done by the watch")
    verdict = lincheck(checked, tmp_path / f"{fault}.html")
    assert verdict.linearizable, verdict.summary
    assert traffic.watch_problems() == []
    await check_members(lab, writer, 0, 1, 2)
