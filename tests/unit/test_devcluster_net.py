"""A plane's loopback block: never one a running plane already bound to (tools/devcluster/net.py)."""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.devcluster import net

pytestmark = pytest.mark.unit


def test_a_block_with_a_bound_address_is_never_picked() -> None:
    first = net.pick_block(random.Random(7), bound=frozenset())
    again = net.pick_block(random.Random(7), bound=frozenset({ipaddress.IPv4Address(first.host)}))
    assert again.base != first.base
    assert again.base.subnet_of(ipaddress.ip_network("127.64.0.0/10"))


def test_with_every_block_taken_it_says_so() -> None:
    everything = frozenset(ipaddress.IPv4Address(f"127.{a}.{b}.1") for a in range(64, 128) for b in range(0, 256, 16))
    with pytest.raises(RuntimeError, match="no free"):
        net.pick_block(random.Random(1), bound=everything)


def test_the_kernel_table_is_read_as_addresses(tmp_path: Path) -> None:
    table = tmp_path / "tcp"
    table.write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0150687F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1\n"
        "   1: 0100007F:0035 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2\n")
    assert net.bound_addresses(str(table)) == {ipaddress.IPv4Address("127.104.80.1"),
                                               ipaddress.IPv4Address("127.0.0.1")}
    assert net.bound_addresses(str(tmp_path / "absent")) == frozenset()


def test_the_default_block_is_a_20_with_its_pods_and_services_where_they_always_were() -> None:
    block = net.Block(ipaddress.ip_network("127.94.112.0/20"))
    assert (block.host, block.pod_cidr, block.service_cidr) == ("127.94.112.1", "127.94.116.0/22", "127.94.120.0/21")
    assert net.prefix_for(0, 0) == net.prefix_for(2000, 1000) == 20


@pytest.mark.parametrize("clusters, prefix", [(300, 20), (1000, 19), (2000, 18), (5000, 17)])
def test_a_plane_asked_for_room_gets_the_smallest_block_that_holds_it(clusters: int, prefix: int) -> None:
    assert net.prefix_for(clusters + 256, clusters + 256) == prefix
    assert net.service_ips(prefix) >= clusters + 256 and net.pod_ips(prefix) >= clusters + 256
    assert net.service_ips(prefix + 1) < clusters + 256 or net.pod_ips(prefix + 1) < clusters + 256 or prefix == 20


def test_a_bigger_block_keeps_the_layout_and_is_aligned_inside_the_pool() -> None:
    block = net.pick_block(random.Random(3), bound=frozenset(), prefix=17)
    assert block.base.prefixlen == 17 and block.base.subnet_of(net.POOL)
    pods, services = ipaddress.ip_network(block.pod_cidr), ipaddress.ip_network(block.service_cidr)
    assert pods.prefixlen == 19 and services.prefixlen == 18
    assert pods.subnet_of(block.base) and services.subnet_of(block.base) and not pods.overlaps(services)
    assert ipaddress.IPv4Address(block.host) not in pods and ipaddress.IPv4Address(block.host) not in services


def test_a_bigger_block_is_never_one_with_a_bound_address_anywhere_in_it() -> None:
    first = net.pick_block(random.Random(5), bound=frozenset(), prefix=17)
    inside = first.base.network_address + 20000  # in a later /20 of it, not its .1
    again = net.pick_block(random.Random(5), bound=frozenset({inside}), prefix=17)
    assert again.base != first.base and inside not in again.base


def test_no_block_holds_more_than_the_pool() -> None:
    with pytest.raises(ValueError, match="no loopback block"):
        net.prefix_for(2 ** 23, 0)


class Draws(random.Random):
    """A random source that draws the given numbers."""

    def __init__(self, draws: Iterator[int]) -> None:
        super().__init__()
        self.draws = draws

    def randrange(self, *_: object, **__: object) -> int:  # type: ignore[override]
        return next(self.draws)


def test_a_claimed_big_block_keeps_every_20_inside_it_from_the_next_plane() -> None:
    block = net.pick_block(prefix=18)
    claims = net.claim(block)
    try:
        bound = net.bound_addresses()
        for quarter in block.base.subnets(new_prefix=20):
            assert any(address in quarter for address in bound), quarter
        # A /20 picker whose draws fall on each of its /20s, then elsewhere, passes them all over.
        inside = [(int(q.network_address) - int(net.POOL.network_address)) // 4096
                  for q in block.base.subnets(new_prefix=20)]
        draws = iter([*inside, (inside[-1] + 1) % 1024])
        picked = net.pick_block(Draws(draws), bound=bound)
        assert not picked.base.overlaps(block.base) and next(draws, None) is None
    finally:
        claims.close()
    assert not any(address in block.base for address in net.bound_addresses())
