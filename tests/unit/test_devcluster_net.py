"""A plane's loopback block: never one a running plane already bound to (tools/devcluster/net.py)."""

from __future__ import annotations

import ipaddress
import random
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
