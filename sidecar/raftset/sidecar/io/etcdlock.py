"""An etcd lock that stays held for its whole critical section, and a fence for what it guards.

The protocol is etcd's usual one (and etcd3aio's, with the same key layout, so sidecars of
the previous release still exclude each other during a rolling upgrade): grant a lease, put
`__etcd3aio:lock/<name>/<lease hex>` with it, hold the lock while that key has the lowest
create revision under the prefix. What this module adds:

* **Kept alive.** The lease is renewed from the moment it is granted (also while waiting in
  the queue) until release, so a slow critical section does not lose the lock to its TTL.
* **Lost, not fatal.** A lease that expired or was revoked, or a key that was deleted, ends
  the wait or the section with `LockLost` (an `EtcdClientError`, so callers retry it like
  any other refusal) instead of an unexpected exception.
* **Fenced.** A Txn compare on the lock key cannot guard a MemberAdd/Remove RPC, so right
  before the mutation `HeldLock.fence(needed)` renews the lease once more, reads the lock
  keys linearizably and lets the mutation go only if our key still holds the lock *and* the
  lease has at least `needed` seconds (the mutation's own timeout) plus a margin left,
  counted from before the renewal was sent. The lease then cannot expire, and no one else
  can take the lock, before the mutation's client deadline has passed.

Residual window (documented in docs/sidecar.md): etcd may still apply a proposal after the
client deadline when it was already forwarded to the leader; a new lock holder's
linearizable MemberList would not yet show it. Etcd's own checks (one learner at a time,
"member not found") and the MemberList read again under the lock keep that window harmless
for the sidecar's mutations.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from etcd3aio.kv import KVService, prefix_range_end
from etcd3aio.lease import LeaseService
from etcd3aio.watch import WatchService

log = logging.getLogger(__name__)

LOCK_PREFIX = "__etcd3aio:lock"  # etcd3aio's: old and new sidecars share one queue
FENCE_MARGIN_S = 1.0  # beyond the mutation's timeout: the TTL is whole seconds, clocks drift
_EVENT_DELETE = 1


@dataclass(frozen=True)
class LockKey:
    """One waiter's key under the lock prefix."""

    key: bytes
    create_revision: int


def holder(keys: Sequence[LockKey]) -> LockKey | None:
    """The key that holds the lock: the oldest (lowest create revision)."""
    return min(keys, key=lambda k: k.create_revision, default=None)


def predecessor(keys: Sequence[LockKey], own: bytes) -> LockKey | None:
    """The key just ahead of ours in the queue; None if ours is first (or gone)."""
    mine = next((k for k in keys if k.key == own), None)
    if mine is None:
        return None
    ahead = [k for k in keys if k.create_revision < mine.create_revision]
    return max(ahead, key=lambda k: k.create_revision, default=None)


def fence_problem(keys: Sequence[LockKey], own: bytes, ttl_left: int, elapsed: float, needed: float,
                  margin: float = FENCE_MARGIN_S) -> str | None:
    """Why a mutation that may take `needed` seconds must not go ahead under this lock; None if it may.

    `ttl_left` is the lease TTL the renewal answered (whole seconds; <= 0: the lease is
    gone) and `elapsed` the seconds since that renewal was sent.
    """
    if ttl_left <= 0:
        return "the lock's lease expired or was revoked"
    if all(k.key != own for k in keys):
        return "the lock key was deleted"
    first = holder(keys)
    if first is None or first.key != own:
        return "another holder is ahead of us"
    left = ttl_left - elapsed
    if left < needed + margin:
        return f"only {left:.1f}s left on the lock's lease, the change needs {needed + margin:.1f}s"
    return None


class HeldLock:
    """One acquisition: the lease kept alive in the background, and the fence."""

    def __init__(self, kv: KVService, lease: LeaseService, watch: WatchService, name: str, ttl: int,
                 call: Callable[[str, Callable[[], Awaitable[Any]], float | None], Awaitable[Any]],
                 lost: Callable[[str], Exception]) -> None:
        self._kv, self._lease, self._watch = kv, lease, watch
        self.prefix = f"{LOCK_PREFIX}/{name}/".encode()
        self.ttl = ttl
        self._call = call  # the client's error mapping and timeout
        self._lost = lost  # the client's LockLost for a reason
        self.lease_id = 0
        self.key = b""
        self.lost: str | None = None  # why the lock was lost, once the keepalive noticed
        self._keepalive: asyncio.Task[None] | None = None

    async def _keys(self) -> tuple[int, list[LockKey]]:
        r = await self._call("Lock", lambda: self._kv.get(self.prefix, prefix_range_end(self.prefix)), None)
        return int(r.header.revision), [LockKey(bytes(kv.key), int(kv.create_revision)) for kv in r.kvs]

    async def _renew(self) -> int:
        """One LeaseKeepAlive round trip; the TTL the server answered (<= 0: the lease is gone)."""
        async def once() -> int:
            stream = self._lease.keep_alive(self.lease_id)
            try:
                response = await stream.read()
            finally:
                stream.cancel()
            return int(getattr(response, "TTL", 0) or 0)
        return int(await self._call("LeaseKeepAlive", once, None))

    async def _keep_alive(self) -> None:
        """Renew every third of the TTL until cancelled; mark the lock lost when the lease is."""
        valid_until = time.monotonic() + self.ttl
        while True:
            await asyncio.sleep(max(0.5, self.ttl / 3))
            sent = time.monotonic()
            try:
                ttl = await self._renew()
            except Exception as exc:  # noqa: BLE001 - a missed renewal is judged by the deadline below
                log.debug("lock %s: renewal failed: %s", self.prefix.decode(), exc)
                if time.monotonic() > valid_until:
                    self.lost = "the lock's lease could not be renewed before it expired"
                    return
                continue
            if ttl <= 0:
                self.lost = "the lock's lease expired or was revoked"
                return
            valid_until = sent + ttl

    async def acquire_within(self, timeout: float, release_timeout: float) -> None:
        """Acquire within `timeout`; a failed or timed-out wait leaves no key behind."""
        try:
            async with asyncio.timeout(timeout):
                await self._acquire()
        except BaseException:
            await self.release(release_timeout)
            raise

    async def _acquire(self) -> None:
        granted = await self._call("Lock", lambda: self._lease.grant(ttl=self.ttl), None)
        self.lease_id = int(granted.ID)
        self.ttl = int(granted.TTL) or self.ttl
        self.key = self.prefix + f"{self.lease_id:016x}".encode()
        self._keepalive = asyncio.create_task(self._keep_alive(), name=f"lock-keepalive-{self.lease_id:x}")
        await self._call("Lock", lambda: self._kv.put(self.key, b"", lease=self.lease_id), None)
        while True:
            revision, keys = await self._keys()
            if all(k.key != self.key for k in keys):
                raise self._lost("the lock key vanished while waiting (its lease expired or was revoked)")
            if predecessor(keys, self.key) is None:
                return
            await self._until_a_delete(revision)

    async def _until_a_delete(self, revision: int) -> None:
        """Wait for any key under the prefix to go (our own included), then look again."""
        events = self._watch.watch(self.prefix, prefix_range_end(self.prefix), start_revision=revision + 1)
        try:
            async for response in events:
                if any(e.type == _EVENT_DELETE for e in response.events):
                    return
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    async def fence(self, needed: float) -> None:
        """Raise LockLost unless a mutation of at most `needed` seconds may run under the lock now."""
        if self.lost:
            raise self._lost(self.lost)
        sent = time.monotonic()
        ttl = await self._renew()
        _, keys = await self._keys()
        problem = fence_problem(keys, self.key, ttl, time.monotonic() - sent, needed)
        if problem is not None:
            raise self._lost(problem)

    async def release(self, timeout: float) -> None:
        """Stop renewing, delete the key, revoke the lease; best effort (the TTL frees it anyway)."""
        if self._keepalive is not None:
            self._keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._keepalive
        if not self.lease_id:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(timeout):
                await self._kv.delete(self.key)
                await self._lease.revoke(self.lease_id)
