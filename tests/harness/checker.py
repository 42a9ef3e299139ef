"""The acknowledged-write checker every recovery scenario ends with.

`Writer` puts keys without pause and records every put a member acknowledged (key ->
value, revision). `check` then proves that nothing acknowledged was lost and that the
members agree: every acknowledged key reads back (linearizably) with its value and the
revision it was acknowledged at, and Maintenance.HashKV gives one hash on every member
at one revision.

Each put attempt writes a key of its own, so a put that timed out on one member and was
retried on another can never overwrite an acknowledged value: the check is exact.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from raftset.sidecar.io.etcdclient import ClientTLS, EtcdClientError, KVHash, MemberClient
from tests.harness.history import Op
from tests.harness.waiting import await_for

PREFIX = "/writer/"


@dataclass(frozen=True)
class Ack:
    value: str
    revision: int
    endpoint: str = ""  # the client URL of the member that acknowledged it


class Writer(threading.Thread):
    """Puts keys on its own event loop; a write that no endpoint took fails, one that did is recorded.

    By default a write tries each endpoint once. With `deadline` it goes round the endpoints
    again until that many seconds have passed since its first try, as an application with a
    deadline per request does: a put the old leader dropped while it handed leadership over
    is then retried, and counts as failed only if the deadline passes.
    """

    def __init__(self, endpoints: list[str], tls: ClientTLS | None = None, timeout: float = 2.0,
                 deadline: float | None = None, lifetime: float = 300.0) -> None:
        super().__init__(daemon=True)
        self.lifetime = lifetime
        self.endpoints = endpoints
        self.tls = tls
        self.timeout = timeout
        self.deadline = deadline
        self.done = threading.Event()
        self.ok = 0
        self.failed = 0
        self.errors: list[str] = []
        self.acked: dict[str, Ack] = {}
        self.longest_stall = 0.0
        self.last_ok: float | None = None
        self._followed = self.tls  # what `follow` last gave, picked up by the next write

    def follow(self, tls: ClientTLS) -> None:
        """The client re-read its TLS material (a CA rotation changed its Secret): the next writes use `tls`."""
        self._followed = tls

    def run(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        clients = [MemberClient(u, self.tls, timeout=self.timeout) for u in self.endpoints]
        deadline = time.monotonic() + self.lifetime  # a writer never outlives a test by much
        attempt = 0
        try:
            while not self.done.is_set() and time.monotonic() < deadline:
                if self._followed is not self.tls:
                    for client in clients:
                        await client.close()
                    self.tls = self._followed
                    clients = [MemberClient(u, self.tls, timeout=self.timeout) for u in self.endpoints]
                wrote = False
                began = time.monotonic()
                while True:
                    for client in clients:
                        attempt += 1
                        key, value = f"{PREFIX}{attempt:09d}", str(attempt)
                        try:
                            revision = await client.put(key, value)
                        except EtcdClientError as exc:
                            self.errors.append(str(exc))
                            continue
                        self.acked[key] = Ack(value, revision, client.url)
                        wrote = True
                        break
                    if wrote or self.deadline is None or time.monotonic() - began >= self.deadline:
                        break
                    await asyncio.sleep(0.05)
                now = time.monotonic()
                if wrote:
                    if self.last_ok is not None:
                        self.longest_stall = max(self.longest_stall, now - self.last_ok)
                    self.last_ok = now
                    self.ok += 1
                else:
                    self.failed += 1
                await asyncio.sleep(0.01)
        finally:
            for client in clients:
                await client.close()

    def stop(self) -> Writer:
        self.done.set()
        self.join(20)
        return self


@dataclass(frozen=True)
class Verdict:
    """What `check` saw: how many acknowledged writes read back, and each member's hash."""

    acknowledged: int
    revision: int
    hashes: dict[str, KVHash]


EXCUSED = "acknowledged by a lost member above the survivor's revision: excused by the quorum loss"


@dataclass(frozen=True)
class ExcusedLoss:
    """The one loss a check may excuse: a quorum loss recovered by forcing a new cluster from a survivor.

    `--force-new-cluster` keeps exactly what the survivor had committed (docs/operations.md,
    "Disaster recovery"; tests/etcd/test_quorum_loss.py). A write can then be lost only if a member
    that was lost with its data acknowledged it, at a revision above the survivor's last committed
    revision. Nothing else is excused: a write the survivor acknowledged, or one at or below its
    revision, must read back like any other.
    """

    survivor_revision: int  # what the survivor held, committed and applied, once quorum was gone
    lost_endpoints: frozenset[str]  # the client URLs of the members lost with their data

    def excuses(self, endpoint: str, revision: int) -> bool:
        return endpoint in self.lost_endpoints and revision > self.survivor_revision

    def acks(self, acked: dict[str, Ack]) -> dict[str, Ack]:
        """The acknowledged writes this loss may have erased."""
        return {k: a for k, a in acked.items() if self.excuses(a.endpoint, a.revision)}

    def history(self, ops: Sequence[Op]) -> list[Op]:
        """The history with each excused write's outcome made unknown: it may have taken effect, or
        not. Reads stay as answered: one that saw an erased write sees time travel afterwards, which
        no documented loss excuses."""
        return [dataclasses.replace(op, returned=None, revision=0, deleted=0, succeeded=False, error=EXCUSED)
                if op.acknowledged_write and self.excuses(op.endpoint, op.revision) else op for op in ops]


def lost_writes(acked: dict[str, Ack], read: dict[str, tuple[str, int]]) -> list[str]:
    """Acknowledged writes that do not read back exactly as acknowledged."""
    problems = []
    for key, ack in sorted(acked.items()):
        got = read.get(key)
        if got != (ack.value, ack.revision):
            problems.append(f"{key}: acknowledged {ack.value!r} at revision {ack.revision}, read {got!r}")
    return problems


async def check(member_urls: Sequence[str], acked: dict[str, Ack], tls: ClientTLS | None = None,
                timeout: float = 30.0) -> Verdict:
    """Every acknowledged write reads back and HashKV agrees on all `member_urls`; AssertionError if not.

    `member_urls` are the client URLs of every member that should hold the data (all voters).
    """
    clients = [MemberClient(u, tls, timeout=5) for u in member_urls]
    try:
        async def read_back() -> tuple[int, dict[str, tuple[str, int]]] | None:
            for client in clients:
                try:
                    revision, kvs = await client.get_prefix(PREFIX)
                except EtcdClientError:
                    continue
                return revision, {k: (kv.value.decode(), kv.mod_revision) for k, kv in kvs.items()}
            return None

        revision, read = await await_for(read_back, timeout, "a linearizable read of the written keys")
        lost = lost_writes(acked, read)
        assert not lost, f"{len(lost)} of {len(acked)} acknowledged writes lost or changed: {lost[:5]}"

        async def hash_of(client: MemberClient) -> KVHash:
            # A member that has not applied `revision` yet answers "future revision": wait for it.
            return await await_for(lambda: client.hash_kv(revision), timeout,
                                   f"HashKV at revision {revision} from {client.url}")

        hashes = dict(zip(member_urls, await asyncio.gather(*(hash_of(c) for c in clients)), strict=True))
        distinct = {(h.hash, h.compact_revision) for h in hashes.values()}
        assert len(distinct) == 1, f"members disagree at revision {revision}: " + ", ".join(
            f"{url} hash {h.hash:x} (compacted at {h.compact_revision})" for url, h in hashes.items())
        return Verdict(acknowledged=len(acked), revision=revision, hashes=hashes)
    finally:
        for client in clients:
            await client.close()
