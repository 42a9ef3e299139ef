"""Scale-out: how long a new member takes to be voting and caught up, per data size.

A three-member cluster (real etcd, real sidecars) is filled to each data size in turn;
then a fourth member joins twice:

  sidecar:  the pod's sidecar starts (kubelet order: sidecar, startupProbe, store); it adds
            a learner, starts etcd, promotes it once in sync. Timed from the sidecar's start
            (the pod object exists already, as it does when kubelet starts its containers).
  baseline: by hand, as without the project: `etcdctl member add` (a voting member at once)
            and `etcd --initial-cluster-state existing`. Timed from the member add.

Both are "done" when the member is started, voting (not a learner) and has applied every
entry the cluster had when the join began. Between the two joins the joined member is
removed and its data deleted, so each join starts from an empty volume. The sidecars run
with the settings the operator renders by default (heartbeat poll every 2 s; a joining
member polls its own status at the promote pace, `raftset.sidecar.pure.promotion`).

Either join may wait out etcd's publish timeout: a new member's first proposal of its name
and client URLs can be committed inside the snapshot the leader then sends it, so it is
never applied as an entry there and etcd waits its request timeout (5 s + two election
timeouts: 7 s at etcd's defaults) before it publishes again and serves clients
(etcd-io/etcd#8608, #16436). Measured at 64 and 256 MiB in three runs: 13 of 18 sidecar joins
and 11 of 18 by-hand ones (none at 0 MiB). Each row says, per join, how often its member's log
shows it (`PUBLISH_TIMEOUT`), so a 7 s jump is read as etcd's, not as the join's.

Every peer port sits behind a real Toxiproxy proxy, as in the scale-in: the three members',
the joining pod's and the by-hand member's, each made before that member first starts. At
each data size both joins run at every one-way latency in turn, only the latency toxic
changing between them (`tests.harness.toxiproxy.set_latency`): the fill is the fixed cost,
and each join starts from the same three members at rest holding the same data.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from raftset.sidecar.io.etcdclient import EtcdClientError, MemberClient
from tests.bench.labs import PRODUCT_DEFAULTS
from tests.bench.scalein import JITTER
from tests.harness.lab import Lab
from tests.harness.toxiproxy import PEER_BEHIND, Toxiproxy, route_peers, set_latency
from tools.devcluster import procs

COLUMNS = ("one_way_ms", "data_mib", "db_size_mib", "sidecar_join_s", "sidecar_store_started_s", "baseline_join_s",
           "sidecar_vs_baseline", "sidecar_publish_timeouts", "baseline_publish_timeouts")
JOINER = 3  # the joining pod's ordinal
VALUE_BYTES = 1024 * 1024 - 1024  # below etcd's 1.5 MiB request limit, a MiB per put with overhead
BASELINE_HOST = "200"  # 127.a.b.200: outside the sidecars' peer URL template (127.a.b.1<ordinal>)
POLL_S = 0.05
# A pause before each join, so it starts from a cluster at rest. etcd refuses a MemberAdd until
# every voter has been connected for 5 s: that holds once after the grow (ETCD_REST_S), and then
# for good, since the joined member is removed before the pause and the three voters stay
# connected (a latency toxic changes on the open connections). The by-hand join's refusals are
# counted and logged (`_member_add`) to show it.
SETTLE_S = 2.0
ETCD_REST_S = 6.0
# What etcd logs when a new member's first publish timed out (see the module's docstring).
PUBLISH_TIMEOUT = "failed to publish local member to cluster through raft"


@contextlib.contextmanager
def routed_lab(kubeconfig: str, workdir: Path) -> Iterator[tuple[Lab, Toxiproxy]]:
    """The benchmark's three-member lab, not grown yet, with a proxy in front of every peer port the
    benchmark uses (ordinals 0-2, the joining pod, the by-hand member): a member's proxy must be
    there before it first starts. The footprint is measured on the same lab (the proxy alone)."""
    lab = Lab(kubeconfig, workdir, replicas=3, env_extra=PRODUCT_DEFAULTS)
    try:
        with Toxiproxy(workdir / "toxiproxy") as toxiproxy:
            route_peers(lab, toxiproxy, range(JOINER + 1))
            ip = _baseline_ip(lab)
            toxiproxy.proxy("peer-baseline", f"{ip}:2380", f"{ip}:{PEER_BEHIND}")
            yield lab, toxiproxy
    finally:
        lab.close()


def _baseline_ip(lab: Lab) -> str:
    return f"{lab.prefix}.{BASELINE_HOST}"


def ratio(sidecar_s: float, baseline_s: float) -> float | None:
    """How many times the by-hand join's time the sidecar's took (None: the by-hand time was 0)."""
    return round(sidecar_s / baseline_s, 2) if baseline_s > 0 else None


async def _fill(lab: Lab, upto_mib: int, have_mib: int) -> None:
    async with MemberClient(lab.pod(0).client_url, timeout=30) as c:
        for i in range(have_mib, upto_mib):
            await c.put(f"/fill/{i:06d}", os.urandom(VALUE_BYTES))


async def _cluster_index(lab: Lab) -> tuple[int, int]:
    """(raft index of the leader, its db size) right now."""
    for ordinal in range(3):
        status = await lab.status(ordinal)
        if status.is_leader:
            return status.raft_index, status.db_size
    raise AssertionError("no leader among ordinals 0-2")


async def _caught_up(lab: Lab, peer_url: str, client_url: str, index: int) -> bool:
    members = await lab.members(0, 1, 2)
    joined = [m for m in members if peer_url in m.peer_urls]
    if not joined or joined[0].is_learner or not joined[0].started:
        return False
    async with MemberClient(client_url, timeout=2) as c:
        status = await c.status()
    return status.raft_applied_index >= index


async def _wait_caught_up(lab: Lab, peer_url: str, client_url: str, index: int, timeout: float = 300) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if await _caught_up(lab, peer_url, client_url, index):
                return time.monotonic()
        except EtcdClientError:
            pass
        await asyncio.sleep(POLL_S)
    raise AssertionError(f"{client_url} not voting and caught up with index {index} after {timeout:.0f}s")


def publish_timeouts(log: Path) -> int:
    """How often a member's log says its publish timed out (etcd's, not the join's: the module's docstring)."""
    return log.read_text(errors="replace").count(PUBLISH_TIMEOUT) if log.exists() else 0


async def sidecar_join(lab: Lab) -> tuple[float, float, int]:
    """(seconds to voting and caught up, seconds until the store could start: learner added, publish timeouts)."""
    pod = lab.pod(JOINER)
    lab.scale(JOINER + 1)
    lab.create_pod(JOINER)  # the API's part, before kubelet starts the containers: not the sidecar's time
    index, _ = await _cluster_index(lab)
    t0 = time.monotonic()
    pod.start(timeout=120)
    store_started = time.monotonic()
    done = await _wait_caught_up(lab, f"http://{pod.ip}:2380", pod.client_url, index)
    timeouts = publish_timeouts(pod.store_log)
    lab.scale(3)
    result = pod.terminate()
    assert result and result.get("removed"), f"the joined member did not leave: {result}"
    shutil.rmtree(pod.root)
    return done - t0, store_started - t0, timeouts


def _member_add(lab: Lab, name: str, peer: str, timeout: float = 30) -> tuple[str, int]:
    """`etcdctl member add`, asked again while etcd refuses it as a person would: (its output, refusals)."""
    deadline = time.monotonic() + timeout
    refusals = 0
    while True:
        done = subprocess.run(
            ["etcdctl", f"--endpoints={lab.pod(0).client_url}", "member", "add", name, f"--peer-urls={peer}"],
            capture_output=True, text=True, timeout=30, env={**os.environ, "ETCDCTL_API": "3"})
        if done.returncode == 0:
            return done.stdout, refusals
        if time.monotonic() > deadline:
            raise AssertionError(f"etcdctl member add failed: {done.stderr}")
        refusals += 1
        time.sleep(0.2)


async def baseline_join(lab: Lab, name: str) -> tuple[float, int, int]:
    """The by-hand join, its member listening for peers behind its proxy (`routed_lab`):
    (seconds to voting and caught up, publish timeouts, refused member adds)."""
    ip = _baseline_ip(lab)
    peer, client = f"http://{ip}:2380", f"http://{ip}:2379"
    data = lab.workdir / name
    index, _ = await _cluster_index(lab)
    t0 = time.monotonic()
    added, refusals = _member_add(lab, name, peer)
    initial = re.search(r'ETCD_INITIAL_CLUSTER="([^"]+)"', added)
    assert initial, f"etcdctl member add said: {added}"
    supervisor = procs.Supervisor(lab.workdir)
    etcd = supervisor.start(name, [
        "etcd", f"--name={name}", f"--data-dir={data}", f"--listen-peer-urls=http://{ip}:{PEER_BEHIND}",
        f"--initial-advertise-peer-urls={peer}", f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}", f"--initial-cluster={initial.group(1)}",
        "--initial-cluster-state=existing"])
    try:
        done = await _wait_caught_up(lab, peer, client, index)
        member = next(m for m in await lab.members(0, 1, 2) if m.name == name)
        async with MemberClient(lab.pod(0).client_url, timeout=10) as c:
            await c.remove(member.id)
    finally:
        supervisor.stop(etcd)
        shutil.rmtree(data, ignore_errors=True)
    return done - t0, publish_timeouts(etcd.log), refusals


async def measure(lab: Lab, toxiproxy: Toxiproxy, sizes_mib: Sequence[int], latencies_ms: Sequence[int] = (0,),
                  settle_s: float = SETTLE_S, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Both joins at each size and one-way latency, on `routed_lab`'s lab grown to ordinals 0-2."""
    rows: list[dict[str, Any]] = []
    have = 0
    for n, size in enumerate(sorted(sizes_mib)):
        set_latency(toxiproxy, 0)  # the fill is not measured
        await _fill(lab, size, have)
        # The first join follows the grow: etcd's 5 s window of the last member's start, not the join's.
        await asyncio.sleep(max(settle_s, ETCD_REST_S if n == 0 else 1.0))
        have = size
        _, db_size = await _cluster_index(lab)  # after bbolt's batched commits
        for i, one_way_ms in enumerate(latencies_ms):
            set_latency(toxiproxy, one_way_ms, round(one_way_ms * JITTER))
            if i:  # at rest after the join before (the wait after the fill is the first's)
                await asyncio.sleep(settle_s)
            base, base_timeouts, refusals = await baseline_join(lab, f"base-{size}-{one_way_ms}")
            await asyncio.sleep(settle_s)
            side, store_started, side_timeouts = await sidecar_join(lab)
            rows.append({"one_way_ms": one_way_ms, "data_mib": size, "db_size_mib": round(db_size / 2**20, 1),
                         "sidecar_join_s": round(side, 3), "sidecar_store_started_s": round(store_started, 3),
                         "baseline_join_s": round(base, 3), "sidecar_vs_baseline": ratio(side, base),
                         "sidecar_publish_timeouts": side_timeouts, "baseline_publish_timeouts": base_timeouts})
            log(f"  scale-out {size} MiB (db {db_size / 2**20:.0f} MiB) at {one_way_ms} ms: sidecar {side:.2f}s "
                f"(store started {store_started:.2f}s, publish timeouts {side_timeouts}), etcdctl by hand {base:.2f}s "
                f"(publish timeouts {base_timeouts}, member add refused {refusals}x) "
                f"({rows[-1]['sidecar_vs_baseline']}x)")
    return rows
