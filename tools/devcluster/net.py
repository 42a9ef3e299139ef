"""Loopback addresses and ports for one control plane.

Each plane takes its own 127.a.b.0 block so that parallel planes (and other helpers'
etcd processes) never collide: .1 for every server (and the fake nodes' IP, so that the
apiserver reaches kwok's kubelet endpoint), the second quarter for pod IPs and the upper
half for Service IPs. The default block is a /20 (1022 pod IPs, 2046 Service IPs); a plane
asked for room (`prefix_for`: the operator benchmark's thousands of one-member clusters,
each a kwok pod and a client Service) takes a bigger one, and holds a listening socket on
the .1 of every /20 inside it, so that the others, which look for a /20 with nothing bound,
never pick one of its /20s. Nothing here is ever routed off the machine.
"""

from __future__ import annotations

import ipaddress
import random
import socket
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PREFIX = 20  # what a plane takes unless asked for room
POOL = ipaddress.ip_network("127.64.0.0/10")  # away from the 127.0.0.x addresses tools default to
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


@dataclass(frozen=True)
class Block:
    base: ipaddress.IPv4Network  # a /20 or bigger inside POOL

    def _part(self, extra_bits: int, index: int) -> ipaddress.IPv4Network:
        return next(n for i, n in enumerate(self.base.subnets(prefixlen_diff=extra_bits)) if i == index)

    @property
    def host(self) -> str:
        """The address every server of this plane binds to."""
        return str(self.base.network_address + 1)

    @property
    def pod_cidr(self) -> str:
        return str(self._part(2, 1))

    @property
    def service_cidr(self) -> str:
        return str(self._part(1, 1))

    def claim_addresses(self) -> list[str]:
        """The .1 of every /20 in the block: one bound socket on each keeps the others' /20s out."""
        return [str(n.network_address + 1) for n in self.base.subnets(new_prefix=DEFAULT_PREFIX)]


def service_ips(prefix: int) -> int:
    """Service IPs in a block's upper half (the apiserver hands out neither end of its range)."""
    return 2 ** (32 - prefix - 1) - 2


def pod_ips(prefix: int) -> int:
    """Pod IPs kwok hands out before it leaves the block's second quarter (it never checks: it counts on)."""
    return 2 ** (32 - prefix - 2)


def prefix_for(services: int, pods: int) -> int:
    """The smallest block (at least a /20) with room for `services` Service IPs and `pods` pod IPs."""
    prefix = DEFAULT_PREFIX
    while service_ips(prefix) < services or pod_ips(prefix) < pods:
        prefix -= 1
        if prefix < POOL.prefixlen + 1:
            raise ValueError(f"no loopback block holds {services} Services and {pods} pods")
    return prefix


def pick_block(rng: random.Random | None = None, bound: frozenset[ipaddress.IPv4Address] | None = None,
               prefix: int = DEFAULT_PREFIX) -> Block:
    """A random block of this size from POOL, none that a running plane's servers (or claims) are
    bound in (`make test`'s workers each start some)."""
    rng = rng or random.SystemRandom()
    taken = bound_addresses() if bound is None else bound
    size = 2 ** (32 - prefix)
    for _ in range(256):
        offset = rng.randrange(POOL.num_addresses // size) * size
        block = ipaddress.ip_network((int(POOL.network_address) + offset, prefix))
        assert block.subnet_of(LOOPBACK)
        if not any(address in block for address in taken):
            return Block(block)
    raise RuntimeError(f"no free 127.x.y.0/{prefix} block in 256 tries")


@dataclass
class Claims:
    """Listening sockets that keep a block's /20s from the other planes until closed."""

    stack: ExitStack

    def close(self) -> None:
        self.stack.close()


def claim(block: Block) -> Claims:
    """One listening socket per /20 of a block bigger than a /20 (a /20's own servers claim it)."""
    stack = ExitStack()
    if block.base.prefixlen < DEFAULT_PREFIX:
        for address in block.claim_addresses():
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((address, 0))
            sock.listen(1)  # only a listening socket shows in /proc/net/tcp, which pick_block reads
    return Claims(stack)


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
