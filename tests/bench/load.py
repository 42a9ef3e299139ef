"""Client load during a benchmark window: concurrent writers, readers and a leader watcher.

All run on one event loop in a background thread and record what they saw with
`time.monotonic()` timestamps; the statistics over it are pure (`stats.py`).

Each writer behaves like an application on an etcd client with several endpoints: one put
of a 1 KiB value at a time, each request with a short timeout; it sticks to the endpoint
that last worked, and when a request fails it asks the next endpoint for the same put at
once, each endpoint at most once (the etcd tier's `tests.harness.checker.Writer` does the
same). A write fails only when no endpoint took it. etcd's own clientv3 does not do this
for a Put that reached a member (its retry interceptor retries a mutation only while no
connection is up), so every failed request is kept as well: that is what an application
without a retry of its own would see. Several writers and linearizable readers run at
once, back to back with only a tiny pause, so the rate is what the machine sustains (the
bench records it). A write's `Sample` spans all its requests, so a retried write's
latency includes the request that failed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from raftset.sidecar.io.etcdclient import ClientTLS, EtcdClientError, MemberClient
from tests.bench.stats import Sample

# At 0-2 ms the machine sets the rate; at 20 ms one-way a put takes about two round trips
# (follower -> leader -> quorum), so there the 8 writers in flight set it (~90 puts/s).
WRITERS = 8
READERS = 2
VALUE_BYTES = 1024
WRITE_PAUSE_S = 0.001  # yields the loop between requests; the rate is set by the members
READ_PAUSE_S = 0.002
REQUEST_TIMEOUT_S = 1.0  # each request's; then the next endpoint
LEADER_POLL_S = 0.05
MAX_SECONDS = 600  # a load never outlives its benchmark by much, even if stop() is never called


@dataclass
class Observed:
    writes: list[Sample] = field(default_factory=list)  # one per write, over all its requests
    reads: list[Sample] = field(default_factory=list)
    failed_write_requests: list[Sample] = field(default_factory=list)  # each request that failed
    failed_read_requests: list[Sample] = field(default_factory=list)
    leaders: list[tuple[float, str]] = field(default_factory=list)  # (time, leader id hex or "")
    errors: list[str] = field(default_factory=list)


class Load(threading.Thread):
    """Writer + reader + leader watcher until `stop()`."""

    def __init__(self, endpoints: Sequence[str], watch: Sequence[str], tls: ClientTLS | None = None,
                 timeout: float = REQUEST_TIMEOUT_S, writers: int = WRITERS, readers: int = READERS) -> None:
        super().__init__(daemon=True, name="bench-load")
        self.endpoints = list(endpoints)
        self.watch = list(watch)
        self.tls = tls
        self.timeout = timeout
        self.writers = writers
        self.readers = readers
        self.observed = Observed()
        self._done = threading.Event()

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        deadline = time.monotonic() + MAX_SECONDS
        clients = {u: MemberClient(u, self.tls, timeout=self.timeout) for u in {*self.endpoints, *self.watch}}
        try:
            await asyncio.gather(
                *(self._requests(clients, self.observed.writes, self.observed.failed_write_requests,
                                 WRITE_PAUSE_S, deadline, n, write=True) for n in range(self.writers)),
                *(self._requests(clients, self.observed.reads, self.observed.failed_read_requests,
                                 READ_PAUSE_S, deadline, n, write=False) for n in range(self.readers)),
                self._leaders(clients, deadline),
            )
        finally:
            for client in clients.values():
                await client.close()

    def _running(self, deadline: float) -> bool:
        return not self._done.is_set() and time.monotonic() < deadline

    async def _requests(self, clients: dict[str, MemberClient], out: list[Sample], failed: list[Sample],
                        pause: float, deadline: float, n: int, *, write: bool) -> None:
        current = 0  # endpoints[0] is a member every strategy keeps: all see the same client path
        i = 0
        value = bytes(VALUE_BYTES)
        while self._running(deadline):
            i += 1
            key = f"/bench/{n}/{i % 1000}"
            start = time.monotonic()
            ok = False
            for _ in range(len(self.endpoints)):  # the same request on each endpoint at most once
                client = clients[self.endpoints[current]]
                attempt = time.monotonic()
                try:
                    if write:
                        await client.put(key, value)
                    else:
                        await client.get(key)  # linearizable: needs a leader
                    ok = True
                    break
                except EtcdClientError as exc:
                    self.observed.errors.append(f"{'put' if write else 'get'}: {exc}")
                    failed.append(Sample(attempt, time.monotonic(), False))
                    current = (current + 1) % len(self.endpoints)
            out.append(Sample(start, time.monotonic(), ok))
            await asyncio.sleep(pause)

    async def _leaders(self, clients: dict[str, MemberClient], deadline: float) -> None:
        while self._running(deadline):
            seen = ""
            now = time.monotonic()
            for url in self.watch:
                try:
                    status = await clients[url].status(timeout=0.5)
                except EtcdClientError:
                    continue
                seen = f"{status.leader:x}" if status.leader else ""
                break
            self.observed.leaders.append((now, seen))
            await asyncio.sleep(LEADER_POLL_S)

    def stop(self) -> Observed:
        self._done.set()
        self.join(30)
        return self.observed

    def wait_writes(self, count: int, timeout: float = 20.0) -> None:
        """Block until `count` writes succeeded (the load is warm)."""
        deadline = time.monotonic() + timeout
        while sum(1 for s in self.observed.writes if s.ok) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"load: fewer than {count} writes succeeded in {timeout:.0f}s: "
                                     f"{self.observed.errors[-3:]}")
            time.sleep(0.05)
