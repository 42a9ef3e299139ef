"""Members in different zones: a real Toxiproxy delays every Raft message between them.

On loopback etcd moves leadership by itself when a leader stops on SIGTERM, so a scale-in
costs almost nothing there whatever the sidecar does. Between zones every message costs a
round trip; these tests show the proxy is on the path (a commit needs one) and that the
leader's hand-off still keeps every write on a scale-in. The numbers side by side are in
`make bench` (docs/benchmarks.md).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftset.sidecar.io.etcdclient import MemberClient
from tests.harness.engines import EngineUnderTest
from tests.harness.scenarios import STALL_BOUND_S, grow, scale_in_under_writer
from tests.harness.toxiproxy import Toxiproxy, peer_proxy_name, route_peers, set_latency

pytestmark = pytest.mark.etcd

ONE_WAY_MS = 20  # a far zone; the bench also runs 2 ms


@pytest.fixture
def toxiproxy(tmp_path: Path) -> Iterator[Toxiproxy]:
    with Toxiproxy(tmp_path / "toxiproxy") as proxy:
        yield proxy


async def _median_put_ms(client: MemberClient, key: str, puts: int = 15) -> float:
    took = []
    for i in range(puts):
        start = time.monotonic()
        await client.put(f"/zone/{key}/{i}", "x")
        took.append(time.monotonic() - start)
    return statistics.median(took) * 1000


async def test_every_commit_crosses_the_zone_link(make_lab, toxiproxy: Toxiproxy) -> None:
    """A put commits only after a follower's acknowledgement came back: at least one round trip."""
    lab = make_lab(replicas=3)
    route_peers(lab, toxiproxy, range(3), one_way_ms=ONE_WAY_MS)
    await grow(lab, 3)
    assert set(toxiproxy.proxies()) == {peer_proxy_name(o) for o in range(3)}
    leader = await lab.leader_ordinal(0, 1, 2)
    async with MemberClient(lab.pod(leader).client_url) as client:
        median_ms = await _median_put_ms(client, "crossing", puts=20)
    print(f"put latency through a {ONE_WAY_MS} ms one-way link: median {median_ms:.1f} ms")
    assert median_ms >= 2 * ONE_WAY_MS * 0.9, f"a commit took {median_ms:.1f} ms: the proxy is not on the path"


async def test_a_latency_changed_on_live_proxies_delays_the_open_connections(make_lab, toxiproxy: Toxiproxy) -> None:
    """The bench measures one cluster at several latencies, changing only the toxic between runs
    (`set_latency`): the members' peer streams stay open across the change, and the next commit
    already pays the new latency, and no longer pays it once it is removed."""
    lab = make_lab(replicas=3)
    route_peers(lab, toxiproxy, range(3))
    await grow(lab, 3)
    leader = await lab.leader_ordinal(0, 1, 2)
    async with MemberClient(lab.pod(leader).client_url) as client:
        before = await _median_put_ms(client, "before")
        set_latency(toxiproxy, ONE_WAY_MS)
        delayed = await _median_put_ms(client, "delayed")
        set_latency(toxiproxy, 0)
        after = await _median_put_ms(client, "after")
    print(f"median put: {before:.1f} ms, {delayed:.1f} ms at {ONE_WAY_MS} ms one-way, {after:.1f} ms without again")
    assert delayed >= 2 * ONE_WAY_MS * 0.9, f"a commit took {delayed:.1f} ms: the new toxic is not on the path"
    assert after <= delayed - ONE_WAY_MS, f"a commit still took {after:.1f} ms: the toxic was not removed"
    assert all(not proxy["toxics"] for proxy in toxiproxy.proxies().values())


async def test_scale_in_of_the_leader_across_zones_keeps_every_write(make_lab, toxiproxy: Toxiproxy,
                                                                    engine_ready: EngineUnderTest) -> None:
    """The leader of a 3-member cluster is scaled away over a slow link: it hands off first,
    the writer loses nothing, and every acknowledged write reads back on the two that stay."""
    lab = make_lab(replicas=3, env_extra=engine_ready.counting_elections())
    route_peers(lab, toxiproxy, range(3), one_way_ms=ONE_WAY_MS, jitter_ms=2)
    result, writer = await scale_in_under_writer(lab, leader=2)
    assert result["removed"] and result["moved_leader_to"] is not None, result
    assert writer.failed == 0, writer.errors[:5]
    assert writer.longest_stall < STALL_BOUND_S, f"writes stalled {writer.longest_stall:.2f}s"
    assert result["elections"] == 1, "the hand-off itself, no election by timeout"
    print(f"scale-in of the leader across {ONE_WAY_MS} ms zones: {writer.ok} writes, {writer.failed} failed, "
          f"longest stall {writer.longest_stall * 1000:.0f} ms, {result['verdict'].acknowledged} read back")
