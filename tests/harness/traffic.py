"""Client traffic with a recorded history, watchers, and the verdict of `lincheck` on them.

`Traffic` runs concurrent clients on its own event loop (a thread, like checker.Writer). Each
client is sequential: it puts unique values, reads linearizably and serializably, deletes, and
compare-and-swaps keys under a prefix, recording every operation (history.Op). Any error is an
unknown outcome: the operation is recorded without a return time and the client goes on.
Watchers follow the prefix from the revision the traffic started at. On stop, one last
linearizable read of every key is recorded too, so that a write lost at the end is seen, and then
one last put, the end mark: a watcher that delivered it settles which writes of unknown outcome
never took effect (`Traffic.settled`), so that a long outage's refused writes do not leave
porcupine more histories than it can search.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from etcd3aio.kv import KVService, prefix_range_end

from raftset.sidecar.io.etcdclient import ClientTLS, EtcdClientError, MemberClient
from tests.harness.history import Kind, Op, to_json
from tests.harness import watchcheck
from tests.harness.watchcheck import Event, watch_problems
from tools.devcluster import build

PREFIX = "/traffic/"
END_KEY = "end"  # under the prefix: the traffic's last write, its end mark (watchcheck.settled)
RESUMES = 5  # how many times a watcher resumes on another endpoint after its member ended the stream
# How often each client picks each operation.
MIX: dict[tuple[Kind, bool], int] = {("put", False): 3, ("get", False): 3, ("get", True): 2,
                                     ("delete", False): 1, ("cas", False): 2}


class TrafficClient(MemberClient):
    """A MemberClient with the calls the traffic makes, answering what the history records."""

    async def put_at(self, key: str, value: str) -> int:
        r = await self._call("Put", lambda: self._kv.put(key, value, timeout=self.timeout))
        return int(r.header.revision)

    async def get_at(self, key: str, serializable: bool) -> tuple[int, bytes | None, int]:
        """(header revision, value or None, mod revision)."""
        r = await self._call("Range", lambda: self._kv.get(key, serializable=serializable, timeout=self.timeout))
        if not r.kvs:
            return int(r.header.revision), None, 0
        return int(r.header.revision), bytes(r.kvs[0].value), int(r.kvs[0].mod_revision)

    async def delete_at(self, key: str) -> tuple[int, int]:
        r = await self._call("DeleteRange", lambda: self._kv.delete(key, timeout=self.timeout))
        return int(r.header.revision), int(r.deleted)

    async def compare_and_swap(self, key: str, expect: str | None, value: str) -> tuple[int, bool]:
        """Put `value` if the key holds `expect` (None: if it is absent)."""
        compare = (KVService.txn_compare_version(key, 0) if expect is None
                   else KVService.txn_compare_value(key, expect))
        r = await self._call("Txn", lambda: self._kv.txn(
            [compare], success=[KVService.txn_op_put(key, value)], failure=[], timeout=self.timeout))
        return int(r.header.revision), bool(r.succeeded)

    async def prefix_at(self, prefix: str, revision: int = 0) -> tuple[int, dict[str, tuple[str, int]]]:
        """(header revision, key -> (value, mod revision)) under `prefix`, as the store held it at
        `revision` (0: now), read linearizably."""
        r = await self._call("Range", lambda: self._kv.get(prefix, prefix_range_end(prefix), revision=revision,
                                                           timeout=self.timeout))
        return int(r.header.revision), {bytes(kv.key).decode(): (bytes(kv.value).decode(), int(kv.mod_revision))
                                        for kv in r.kvs}

    async def watch_prefix(self, prefix: str, start: int, sink: list[Event]) -> None:
        """Append every event under `prefix` from revision `start` to `sink`, until cancelled."""
        async for response in self._watch.watch(prefix, prefix_range_end(prefix), start_revision=start):
            for e in response.events:
                kind = "delete" if int(e.type) == 1 else "put"
                sink.append(Event(int(e.kv.mod_revision), bytes(e.kv.key).decode(), kind,
                                  "" if kind == "delete" else bytes(e.kv.value).decode()))


@dataclass(eq=False)  # a Thread must stay hashable
class Traffic(threading.Thread):
    """`clients` sequential clients over `endpoints` (client n talks to endpoint n mod len, or
    every one to `pin`), on `keys` keys under `prefix`, plus `watchers` watchers from the starting
    revision. Two runs on one store need prefixes of their own: each history starts from absent keys."""

    endpoints: Sequence[str]
    prefix: str = PREFIX
    clients: int = 8
    keys: int = 6
    watchers: int = 1
    pin: str | None = None
    tls: ClientTLS | None = None
    timeout: float = 2.0
    seed: int = 27
    history: list[Op] = field(default_factory=list)
    events: list[list[Event]] = field(default_factory=list)
    start_revision: int = 0
    errors: list[str] = field(default_factory=list)
    watch_errors: list[str] = field(default_factory=list)  # how each watch that gave up ended

    def __post_init__(self) -> None:
        super().__init__(daemon=True)
        self.done = threading.Event()
        self.started_clients = threading.Event()
        self.crashed: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # reported by stop(): a history cut short must not pass as whole
            self.crashed = exc
            self.started_clients.set()

    def stop(self, timeout: float = 30.0) -> Traffic:
        self.done.set()
        self.join(timeout)
        if self.is_alive():
            raise AssertionError("the traffic did not stop")
        if self.crashed is not None:
            raise AssertionError(f"the traffic crashed: {self.crashed!r}") from self.crashed
        return self

    def endpoint(self, client: int) -> str:
        return self.pin or self.endpoints[client % len(self.endpoints)]

    async def _run(self) -> None:
        self.start_revision = await self._first_answer(lambda c: c.revision()) + 1
        self.events = [[] for _ in range(self.watchers)]
        watch_clients: list[TrafficClient] = []
        watches = [asyncio.create_task(self._watch(n, sink, watch_clients)) for n, sink in enumerate(self.events)]
        try:
            self.started_clients.set()
            await asyncio.gather(*(self._client(n) for n in range(self.clients)))
            await self._final_reads()
            await self._mark_end()
            await self._catch_up(watches)
        finally:
            # A watch that ended on its own stopped delivering: how, for its gaps' report.
            early = {n for n, task in enumerate(watches) if task.done()}
            for task in watches:
                task.cancel()
            ended = await asyncio.gather(*watches, return_exceptions=True)
            self.watch_errors = [f"watcher {n}: {ended[n]!r}" if ended[n] is not None else f"watcher {n}: stream ended"
                                 for n in sorted(early)]
            for c in watch_clients:
                await c.close()

    async def _watch(self, n: int, sink: list[Event], clients: list[TrafficClient]) -> None:
        """Watcher `n`, resumed after its last delivered revision on the next endpoint when its member
        ends the stream (a member replaced becomes a learner, which serves no watch), as etcd's own
        client does; it gives up after RESUMES such ends, and its last error is reported."""
        for attempt in range(RESUMES + 1):
            start = sink[-1].revision + 1 if sink else self.start_revision
            client = TrafficClient(self.pin or self.endpoints[(n + attempt) % len(self.endpoints)], self.tls,
                                   timeout=self.timeout)
            clients.append(client)
            try:
                return await client.watch_prefix(self.prefix, start, sink)
            except grpc.aio.AioRpcError:
                if attempt == RESUMES:
                    raise
                await asyncio.sleep(0.2)

    async def _first_answer(self, call: Callable[[TrafficClient], Awaitable[int]]) -> int:
        for url in [self.pin] if self.pin else self.endpoints:
            try:
                async with TrafficClient(url, self.tls, timeout=self.timeout) as c:
                    return await call(c)
            except EtcdClientError as exc:
                self.errors.append(str(exc))
        raise AssertionError(f"no endpoint answered: {self.errors[-3:]}")

    async def _client(self, n: int) -> None:
        rng = random.Random(self.seed * 1000 + n)
        kinds, weights = zip(*MIX.items())
        seen: dict[str, str | None] = {}  # what this client last read or wrote per key
        count = 0
        backoff = 0.0
        async with TrafficClient(self.endpoint(n), self.tls, timeout=self.timeout) as client:
            while not self.done.is_set():
                (kind, serializable), = rng.choices(kinds, weights)
                key = f"{self.prefix}{rng.randrange(self.keys)}"
                count += 1
                value = f"c{n}-{count}" if kind in ("put", "cas") else ""
                op = await self._record(client, n, kind, serializable, key, value, seen.get(key))
                self.history.append(op)
                if not op.unknown:
                    seen[key] = _held_after(op, seen.get(key))
                # After a failure, back off: a member that is down refuses at once, and hundreds of
                # writes with unknown outcomes on a few keys are more than porcupine can search.
                backoff = 0.0 if not op.unknown else min(max(2 * backoff, 0.25), 2.0)
                await asyncio.sleep(backoff or 0.005)

    async def _record(self, client: TrafficClient, n: int, kind: Kind, serializable: bool, key: str,
                      value: str, expect: str | None) -> Op:
        base = Op(client=n, op=kind, key=key, call=time.monotonic_ns(), returned=None, value=value,
                  expect=expect if kind == "cas" else None, serializable=serializable, endpoint=client.url)
        try:
            if kind == "put":
                answer: dict[str, object] = {"revision": await client.put_at(key, value)}
            elif kind == "get":
                revision, got, mod = await client.get_at(key, serializable)
                answer = {"revision": revision, "found": got is not None, "got": (got or b"").decode(),
                          "mod_revision": mod}
            elif kind == "delete":
                revision, deleted = await client.delete_at(key)
                answer = {"revision": revision, "deleted": deleted}
            else:
                revision, succeeded = await client.compare_and_swap(key, expect, value)
                answer = {"revision": revision, "succeeded": succeeded}
        except EtcdClientError as exc:
            self.errors.append(str(exc))
            return dataclasses.replace(base, error=str(exc))
        return dataclasses.replace(base, returned=time.monotonic_ns(), **answer)  # type: ignore[arg-type]

    async def _final_reads(self) -> None:
        """A linearizable read of every key, by a client of its own, from the first endpoint that answers."""
        client_id = self.clients
        for k in range(self.keys):
            client_id = await self._until_answered(client_id, "get", f"{self.prefix}{k}", "")

    async def _mark_end(self) -> None:
        """One put after every client stopped and every key was read: a watcher that delivered it
        without a gap has delivered every write that took effect before (watchcheck.settled)."""
        client_id = max((op.client for op in self.history), default=self.clients) + 1
        await self._until_answered(client_id, "put", self.prefix + END_KEY, END_KEY)

    async def _until_answered(self, client_id: int, kind: Kind, key: str, value: str) -> int:
        """`kind` on `key`, recorded, tried on each endpoint in turn until one answers; after an
        unknown outcome the next try is a new client's (its operations must not overlap). Returns the
        client id the next operation may use."""
        for url in [self.pin] if self.pin else self.endpoints:
            async with TrafficClient(url, self.tls, timeout=self.timeout) as client:
                op = await self._record(client, client_id, kind, False, key, value, None)
            self.history.append(op)
            if not op.unknown:
                break
            client_id += 1
        return client_id

    async def _catch_up(self, watches: list[asyncio.Task[None]], timeout: float = 10.0) -> None:
        """Give the watchers time to deliver up to the newest acknowledged revision."""
        horizon = self.horizon()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(events and events[-1].revision >= horizon for events in self.events) or horizon < self.start_revision:
                return
            if any(task.done() for task in watches):
                return
            await asyncio.sleep(0.1)

    def horizon(self, ops: Sequence[Op] | None = None) -> int:
        """The newest revision a client was told it wrote at."""
        return max((op.revision for op in (self.history if ops is None else ops) if op.acknowledged_write), default=0)

    def watch_problems(self, ops: Sequence[Op] | None = None) -> list[str]:
        """The watchers' events against the history, or against `ops` (the history as a documented
        loss excuses it: checker.ExcusedLoss)."""
        ops = self.history if ops is None else ops
        return [f"watcher {n}: {p}" for n, events in enumerate(self.events)
                for p in watch_problems(events, ops, self.start_revision, self.horizon(ops))]


    def settled(self, ops: Sequence[Op] | None = None) -> list[Op]:
        """The history (or `ops`, the history as a loss excuses it) without the writes that a watcher
        which delivered the end mark without a problem proves never took effect; as it is when no
        watcher did."""
        ops = self.history if ops is None else ops
        ends = [op.revision for op in ops if op.key == self.prefix + END_KEY and op.acknowledged_write]
        horizon = self.horizon(ops)
        for events in self.events:
            if ends and events and events[-1].revision >= ends[0] \
                    and not watch_problems(events, ops, self.start_revision, horizon):
                return watchcheck.settled(ops, events)
        return list(ops)


def _held_after(op: Op, before: str | None) -> str | None:
    """What the key held just after `op`, as far as its client knows."""
    if op.op == "put" or (op.op == "cas" and op.succeeded):
        return op.value
    if op.op == "get":
        return op.got if op.found else None
    if op.op == "delete":
        return None
    return before


def unknown_causes(ops: Sequence[Op], top: int = 3) -> list[tuple[str, int]]:
    """The commonest errors behind unknown outcomes, each cut to its first line, with their counts."""
    return Counter(op.error.split("\n", 1)[0][:120] for op in ops if op.unknown).most_common(top)


@dataclass(frozen=True)
class Verdict:
    linearizable: bool
    summary: str  # lincheck's one line
    html: Path | None  # porcupine's visualization, written on a violation


def lincheck(ops: Sequence[Op], html: Path, timeout: float = 120.0) -> Verdict:
    """Run the checker on a history; the visualization lands at `html` when it says no, and the
    history itself beside it (`.json`) in any case."""
    build.ensure(build.LINCHECK, log=lambda _: None)
    history = html.with_suffix(".json")
    history.write_text(to_json(ops))
    proc = subprocess.run([str(build.LINCHECK.binary("lincheck")), "-html", str(html), str(history)],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode not in (0, 1):
        raise AssertionError(f"lincheck gave no verdict (exit {proc.returncode}): {proc.stdout}{proc.stderr}")
    ok = proc.returncode == 0
    return Verdict(ok, proc.stdout.strip(), None if ok else html)
