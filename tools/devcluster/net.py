"""Loopback addresses and ports for one control plane.

Each plane takes its own 127.a.b.0/20 block so that parallel planes (and other helpers'
etcd processes) never collide: .b.1 for every server (and the fake nodes' IP, so that the
apiserver reaches kwok's kubelet endpoint), the second /22 for pod IPs and the upper /21
for Service IPs (2046 of them: the operator benchmark runs 300 clusters of two Services
each). Nothing here is ever routed off the machine.
"""

from __future__ import annotations

import ipaddress
import random
import socket
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Block:
    base: ipaddress.IPv4Network  # a /20 inside 127.0.0.0/8

    def _part(self, prefix: int, index: int) -> ipaddress.IPv4Network:
        return list(self.base.subnets(new_prefix=prefix))[index]

    @property
    def host(self) -> str:
        """The address every server of this plane binds to."""
        return str(self.base.network_address + 1)

    @property
    def pod_cidr(self) -> str:
        return str(self._part(22, 1))

    @property
    def service_cidr(self) -> str:
        return str(self._part(21, 1))


LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def pick_block(rng: random.Random | None = None, bound: frozenset[ipaddress.IPv4Address] | None = None) -> Block:
    """A random /20 from 127.64.0.0/10, away from the 127.0.0.x addresses tools default to, and
    none that a running plane's servers already bound to (`make test`'s workers each start some)."""
    rng = rng or random.SystemRandom()
    taken = bound_addresses() if bound is None else bound
    for _ in range(256):
        block = ipaddress.ip_network(f"127.{rng.randrange(64, 128)}.{rng.randrange(0, 256, 16)}.0/20")
        assert block.subnet_of(LOOPBACK)
        if not any(address in block for address in taken):
            return Block(block)
    raise RuntimeError("no free 127.x.y.0/20 block in 256 tries")


def bound_addresses(table: str = "/proc/net/tcp") -> frozenset[ipaddress.IPv4Address]:
    """The IPv4 addresses some TCP socket on this machine is bound to (the kernel's table)."""
    try:
        lines = Path(table).read_text().splitlines()[1:]
    except OSError:
        return frozenset()
    return frozenset(ipaddress.IPv4Address(socket.ntohl(int(line.split()[1].split(":")[0], 16)))
                     for line in lines if line.split())


def free_port(host: str) -> int:
    """A port the kernel just handed out on `host`; the tiny reuse race is accepted."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
