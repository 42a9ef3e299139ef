"""The project's one etcd v3 client: membership, status, leadership, and a little KV.

A thin layer over etcd3aio's service facades (asyncio, grpc.aio). Why not use
`etcd3aio.Etcd3Client` directly: it dials `ipv4:` targets only (no DNS names, which
pods need) and retries every unary call on UNAVAILABLE, including MemberAdd, where a
lost reply must never turn into a second member. So this module opens its own channel
per member and passes `max_attempts=1` to every call; read-only calls are retried here
with tenacity, membership mutations never are. Callers make mutations idempotent by
reading MemberList first (see docs/etcd-client.md).

Both etcd and Xline speak this API; where their refusal texts differ, each engine's
texts come from its description in raftset/engines.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from types import TracebackType
from typing import TypeVar
from urllib.parse import urlsplit

import grpc
import grpc.aio
from etcd3aio.cluster import ClusterService
from etcd3aio.errors import EtcdError
from etcd3aio.kv import KVService, prefix_range_end
from etcd3aio.lease import LeaseService
from etcd3aio._protobuf import MaintenanceStub, SnapshotRequest
from etcd3aio.maintenance import AlarmType, MaintenanceService
from etcd3aio.watch import WatchService
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from raftset.engines import ENGINES, TLSFiles
from raftset.sidecar.io.etcdlock import HeldLock
from raftset.sidecar.pure.etcd import Alarm, AlarmKind, KVHash, Member, Status

log = logging.getLogger(__name__)

T = TypeVar("T")

# Short reconnect backoff: grpc's default grows to 120 s, which would hide a member that
# came back long after it is serving again. A channel to a member that just restarted may
# still fail fast for up to this long (plus grpc's 20 % jitter) after the member serves.
MAX_RECONNECT_BACKOFF_S = 2.0
_CHANNEL_OPTIONS: list[tuple[str, int | str]] = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", int(MAX_RECONNECT_BACKOFF_S * 1000)),
    # grpc shares subchannels between channels of one process by default, so a fresh
    # client to a member that just came back inherited another client's reconnect backoff
    # and failed at once; each client keeps its own connection state instead.
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.enable_retries", 0),
]


class Refusal(Enum):
    """Answers of a member that callers act on; matched on the server's message."""

    TOO_MANY_LEARNERS = "too many learner members in cluster"
    LEARNER_NOT_READY = "can only promote a learner member which is in sync with leader"
    NOT_A_LEARNER = "can only promote a learner member"
    MEMBER_NOT_FOUND = "member not found"
    PEER_URL_EXISTS = "peerurl exists"
    MEMBER_EXISTS = "member id already exist"
    NOT_ENOUGH_STARTED = "not enough started members"
    UNHEALTHY = "unhealthy cluster"
    LEARNER_RPC = "rpc not supported for learner"
    NOT_LEADER = "not leader"
    NO_LEADER = "no leader"
    MEMBER_REMOVED = "member has been permanently removed"
    COMPACTED = "required revision has been compacted"
    FUTURE_REVISION = "required revision is a future revision"  # the member has not applied it yet
    CORRUPT = "corrupt cluster"  # a CORRUPT alarm stands: every write is refused
    OTHER = ""

    @classmethod
    def of(cls, message: str) -> Refusal:
        """etcd's texts are the members' values; other engines' texts come from their
        capabilities (a client does not know which engine answers)."""
        text = message.lower().replace("peer urls already exists", "peerurl exists")
        for refusal in cls:
            if refusal is not cls.OTHER and refusal.value in text:
                return refusal
        for engine in ENGINES.values():
            for name, fragments in engine.capabilities.refusal_texts.items():
                if any(fragment in text for fragment in fragments):
                    return cls[name]
        return cls.OTHER


class EtcdClientError(Exception):
    """A call to one member failed; `refusal` says why when the member answered."""

    def __init__(self, endpoint: str, operation: str, message: str, *, reachable: bool) -> None:
        super().__init__(f"{operation} at {endpoint}: {message}")
        self.endpoint = endpoint
        self.operation = operation
        self.message = message
        self.reachable = reachable
        self.refusal = Refusal.of(message) if reachable else Refusal.OTHER


class Unreachable(EtcdClientError):
    """No answer from the member (connection refused, timeout, TLS handshake failed)."""

    def __init__(self, endpoint: str, operation: str, message: str) -> None:
        super().__init__(endpoint, operation, message, reachable=False)


class LockLost(EtcdClientError):
    """The lock's lease expired, was revoked, or its key was deleted: whatever it guarded did not run.

    An EtcdClientError, so every caller retries it like a refusal: losing the lock is never fatal."""

    def __init__(self, endpoint: str, name: str, reason: str) -> None:
        super().__init__(endpoint, "Lock", f"lock {name} lost: {reason}", reachable=True)


class TLSConfigError(Exception):
    """The mounted certificate files are missing or unreadable: a setup error to report."""


@dataclass(frozen=True)
class ClientTLS:
    """PEM bytes for a mutual-TLS client."""

    ca: bytes
    cert: bytes
    key: bytes

    @classmethod
    def load(cls, files: TLSFiles) -> ClientTLS:
        """Read and parse the client material now, so bad files fail with their path.

        The standard library's ssl parses it: `cryptography` would add 10 MiB to every sidecar
        for this check alone. A key that does not match the certificate fails here too."""
        ca = _read(files.ca)
        cert = _read(files.client_cert)
        key = _read(files.client_key)
        try:
            _parse_certificates(ca)
        except (ssl.SSLError, ValueError) as exc:
            raise TLSConfigError(f"{files.ca} is not a PEM CA certificate: {exc}") from exc
        try:
            _parse_certificates(cert)
        except (ssl.SSLError, ValueError) as exc:
            raise TLSConfigError(f"{files.client_cert} is not a PEM certificate: {exc}") from exc
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(
                files.client_cert, files.client_key, password=_no_password)
        except (ssl.SSLError, ValueError) as exc:
            raise TLSConfigError(f"{files.client_key} is not an unencrypted PEM key of {files.client_cert}: "
                                 f"{exc}") from exc
        return cls(ca=ca, cert=cert, key=key)


def _parse_certificates(pem: bytes) -> None:
    """Raise unless `pem` holds at least one X.509 certificate (ssl parses trust anchors fully)."""
    ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=pem.decode("ascii"))


def _no_password() -> bytes:
    raise ValueError("the key is encrypted")


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise TLSConfigError(f"cannot read TLS file {path}: {exc.strerror}") from exc


@dataclass(frozen=True)
class KeyValue:
    """One key as a Range returned it."""

    value: bytes
    mod_revision: int


# The pod name and client URL that a member with these peer URLs was started with; None for peer
# URLs no pod of the cluster advertises.
Advertised = Callable[[Sequence[str]], tuple[str, str] | None]


def with_lost_names(members: Sequence[Member], advertised: Advertised) -> list[Member]:
    """Voters listed without a name (and client URLs) given those of the pod their peer URLs belong to.

    For an engine that loses a joined member's name (Capabilities.keeps_joined_names False): such a
    voter has started, and would otherwise read as never started for good. Learners, and voters
    whose peer URLs no pod advertises, stay as listed."""
    out = []
    for m in members:
        found = advertised(m.peer_urls) if not m.name and not m.is_learner else None
        out.append(m if found is None else dataclasses.replace(m, name=found[0], client_urls=(found[1],)))
    return out


def _members(raw: Iterable[object]) -> list[Member]:
    return [
        Member(
            id=int(m.ID),  # type: ignore[attr-defined]
            name=str(m.name),  # type: ignore[attr-defined]
            peer_urls=tuple(m.peerURLs),  # type: ignore[attr-defined]
            client_urls=tuple(m.clientURLs),  # type: ignore[attr-defined]
            is_learner=bool(m.isLearner),  # type: ignore[attr-defined]
        )
        for m in raw
    ]


def grpc_target(url: str) -> str:
    """`http://host:2379` -> `host:2379` (grpc resolves DNS names itself)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if not parts.hostname or not parts.port:
        raise ValueError(f"not a client URL with host and port: {url!r}")
    return parts.netloc


class MemberClient:
    """A client of ONE member, so that Status and MoveLeader reach the member meant."""

    def __init__(self, url: str, tls: ClientTLS | None = None, *, timeout: float = 5.0,
                 linearizable_member_list: bool = True, lost_names: Advertised | None = None) -> None:
        self.url = url
        self.timeout = timeout
        # The default of member_list(): an engine whose linearizable MemberList hangs says False.
        self.linearizable_member_list = linearizable_member_list
        # Where the engine loses joined members' names: how member_list() restores them (with_lost_names).
        self.lost_names = lost_names
        target = grpc_target(url)
        if tls:
            creds = grpc.ssl_channel_credentials(
                root_certificates=tls.ca, private_key=tls.key, certificate_chain=tls.cert,
            )
            self._channel = grpc.aio.secure_channel(target, creds, options=_CHANNEL_OPTIONS)
        else:
            self._channel = grpc.aio.insecure_channel(target, options=_CHANNEL_OPTIONS)
        self._cluster = ClusterService(self._channel, max_attempts=1)
        self._kv = KVService(self._channel, max_attempts=1)
        self._maintenance = MaintenanceService(self._channel, max_attempts=1)
        self._lease = LeaseService(self._channel, max_attempts=1)
        self._watch = WatchService(self._channel, max_attempts=1)

    async def __aenter__(self) -> MemberClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    async def _call(self, operation: str, call: Callable[[], Awaitable[T]], timeout: float | None = None) -> T:
        try:
            async with asyncio.timeout(timeout or self.timeout):
                return await call()
        except TimeoutError as exc:
            raise Unreachable(self.url, operation, "timed out") from exc
        except grpc.aio.AioRpcError as exc:
            raise self._error(operation, exc.code(), exc.details()) from exc
        except EtcdError as exc:
            cause = exc.__cause__
            if isinstance(cause, grpc.aio.AioRpcError):
                raise self._error(operation, cause.code(), cause.details()) from exc
            raise Unreachable(self.url, operation, str(exc)) from exc

    def _error(self, operation: str, code: grpc.StatusCode, details: str | None) -> EtcdClientError:
        # etcd answers some refusals with UNAVAILABLE too ("etcdserver: unhealthy cluster"):
        # its "etcdserver:" prefix tells a member's answer from a failed connection.
        text = details or code.name
        answered = text.startswith("etcdserver:") or code not in (
            grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        if answered:
            return EtcdClientError(self.url, operation, text, reachable=True)
        return Unreachable(self.url, operation, text)

    # Read-only calls.

    async def status(self, timeout: float | None = None) -> Status:
        r = await self._call("Status", lambda: self._maintenance.status(timeout=timeout or self.timeout), timeout)
        return Status(
            endpoint=self.url,
            member_id=int(r.header.member_id),
            cluster_id=int(r.header.cluster_id),
            leader=int(r.leader),
            raft_term=int(r.raftTerm),
            raft_index=int(r.raftIndex),
            raft_applied_index=int(r.raftAppliedIndex),
            is_learner=bool(r.isLearner),
            errors=tuple(r.errors),
            version=str(r.version),
            db_size=int(r.dbSize),
            db_size_in_use=int(r.dbSizeInUse),
        )

    async def member_list(self, *, linearizable: bool | None = None) -> list[Member]:
        """Linearizable by default (etcd >= 3.5 honours it; then it needs a quorum);
        serializable is this member's own, possibly stale, view."""
        r = await self._call("MemberList", lambda: self._cluster.member_list(
            linearizable=self.linearizable_member_list if linearizable is None else linearizable,
            timeout=self.timeout))
        members = _members(r.members)
        return members if self.lost_names is None else with_lost_names(members, self.lost_names)

    async def get(self, key: str, *, serializable: bool = False, timeout: float | None = None) -> bytes | None:
        r = await self._call("Range", lambda: self._kv.get(key, serializable=serializable,
                                                           timeout=timeout or self.timeout), timeout)
        return bytes(r.kvs[0].value) if r.kvs else None

    async def get_prefix(self, prefix: str, *, serializable: bool = False) -> tuple[int, dict[str, KeyValue]]:
        """Every key under `prefix`, read linearizably (or from this member alone, which needs no
        quorum), and the revision the read saw."""
        r = await self._call("Range", lambda: self._kv.get(prefix, prefix_range_end(prefix), serializable=serializable,
                                                           timeout=self.timeout))
        return int(r.header.revision), {
            bytes(kv.key).decode(): KeyValue(bytes(kv.value), int(kv.mod_revision)) for kv in r.kvs}

    async def hash_kv(self, revision: int, timeout: float | None = None) -> KVHash:
        """This member's hash of the keys up to `revision`; equal on every member that applied it.
        It reads the whole key space: give a large store more than the default timeout."""
        r = await self._call("HashKV", lambda: self._maintenance.hash_kv(revision, timeout=timeout or self.timeout),
                             timeout)
        return KVHash(member_id=int(r.header.member_id), revision=revision, hash=int(r.hash),
                      compact_revision=int(r.compact_revision))

    async def snapshot(self, sink: Callable[[bytes], Awaitable[None]], timeout: float = 600.0) -> None:
        """Stream Maintenance.Snapshot into `sink`, chunk by chunk.

        The response header's revision is not returned: etcd and Xline both read it after the
        database snapshot was taken, so a write that lands in between counts in it and is not in
        the snapshot (CI lost revision 296 of an Xline backup that way). Never retried: a broken
        stream means the caller discards what it has.
        """
        async def stream() -> None:
            call = MaintenanceStub(self._channel).Snapshot(SnapshotRequest(), timeout=timeout)
            async for response in call:
                if response.blob:
                    await sink(bytes(response.blob))

        await self._call("Snapshot", stream, timeout)

    async def alarms(self) -> list[Alarm]:
        """The cluster's active alarms (NOSPACE, CORRUPT), as this member knows them."""
        r = await self._call("Alarm", lambda: self._maintenance.alarms(timeout=self.timeout))
        return [Alarm(int(a.memberID), AlarmKind(int(a.alarm))) for a in r.alarms
                if a.alarm in (AlarmType.NOSPACE, AlarmType.CORRUPT)]

    async def revision(self, *, serializable: bool = False, timeout: float | None = None) -> int:
        """The store's current revision (a linearizable read of one key, which nothing writes), or with
        `serializable` the revision this member has applied (on Xline a linearizable read answers
        with the leader's)."""
        r = await self._call("Range", lambda: self._kv.get("raftset/revision", serializable=serializable,
                                                           timeout=timeout or self.timeout), timeout)
        return int(r.header.revision)

    # Mutations: one attempt each, never retried here.

    async def compact(self, revision: int, timeout: float | None = None) -> None:
        """Drop the key history before `revision`; physical, so that a defragmentation after it frees the space."""
        await self._call("Compact", lambda: self._kv.compact(revision, physical=True, timeout=timeout or self.timeout),
                         timeout)

    async def defragment(self, timeout: float = 120.0) -> None:
        """Rewrite this member's backend file without its free pages; the member serves nothing meanwhile."""
        await self._call("Defragment", lambda: self._maintenance.defragment(timeout=timeout), timeout)

    async def disarm(self, alarm: Alarm) -> None:
        """Clear one member's alarm; etcd raises it again if its cause is still there."""
        await self._call("Alarm", lambda: self._maintenance.alarm_deactivate(
            AlarmType(alarm.kind.value), member_id=alarm.member_id, timeout=self.timeout))


    async def put(self, key: str, value: str | bytes) -> int:
        """Write a key; returns the revision. For tests and probes."""
        r = await self._call("Put", lambda: self._kv.put(key, value, timeout=self.timeout))
        return int(r.header.revision)

    async def add_learner(self, peer_url: str) -> tuple[Member, list[Member]]:
        r = await self._call(
            "MemberAdd", lambda: self._cluster.member_add([peer_url], is_learner=True, timeout=self.timeout),
        )
        return _members([r.member])[0], _members(r.members)

    async def promote(self, member_id: int) -> list[Member]:
        r = await self._call("MemberPromote", lambda: self._cluster.member_promote(member_id, timeout=self.timeout))
        return _members(r.members)

    async def remove(self, member_id: int) -> list[Member]:
        r = await self._call("MemberRemove", lambda: self._cluster.member_remove(member_id, timeout=self.timeout))
        return _members(r.members)

    async def move_leader(self, target_id: int, timeout: float | None = None) -> None:
        """Hand leadership to `target_id`; this client must be connected to the leader."""
        await self._call(
            "MoveLeader",
            lambda: self._maintenance.move_leader(target_id, timeout=timeout or self.timeout),
            timeout,
        )

    @contextlib.asynccontextmanager
    async def lock(self, name: str, *, ttl: int = 15, timeout: float | None = None) -> AsyncIterator[HeldLock]:
        """An etcd lock kept alive until release (a crashed holder frees it after `ttl`).

        Yields the held lock: call `await held.fence(seconds)` right before the mutation it
        guards. A lost lock raises LockLost (here or from the fence), never anything unexpected.
        """
        lock = HeldLock(self._kv, self._lease, self._watch, name, ttl, self._call,
                        lambda reason: LockLost(self.url, name, reason))
        try:
            await lock.acquire_within(timeout or self.timeout, release_timeout=self.timeout)
        except TimeoutError as exc:
            raise Unreachable(self.url, "Lock", "timed out waiting for the lock") from exc
        try:
            yield lock
        finally:
            await lock.release(self.timeout)


class ClusterClient:
    """Several members' clients; reads go to whichever answers, writes to one that did."""

    def __init__(self, tls: ClientTLS | None = None, *, timeout: float = 5.0,
                 linearizable_member_list: bool = True, lost_names: Advertised | None = None) -> None:
        self.tls = tls
        self.timeout = timeout
        self.linearizable_member_list = linearizable_member_list
        self.lost_names = lost_names
        self._clients: dict[str, MemberClient] = {}

    def member(self, url: str) -> MemberClient:
        client = self._clients.get(url)
        if client is None:
            client = self._clients[url] = MemberClient(url, self.tls, timeout=self.timeout,
                                                       linearizable_member_list=self.linearizable_member_list,
                                                       lost_names=self.lost_names)
        return client

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

    async def first_answer(
        self, urls: Sequence[str], read: Callable[[MemberClient], Awaitable[T]], *, attempts: int = 2,
    ) -> tuple[MemberClient, T]:
        """Run a read-only `read` on the first member that answers; retried with backoff.

        Raises the last error when no member answered in any attempt.
        """
        if not urls:
            raise Unreachable("-", "any", "no endpoints given")

        async def sweep() -> tuple[MemberClient, T]:
            last: EtcdClientError | None = None
            for url in urls:
                client = self.member(url)
                try:
                    return client, await read(client)
                except EtcdClientError as exc:
                    last = exc
            assert last is not None
            raise last

        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=0.2, max=2),
            retry=retry_if_exception_type(EtcdClientError),
            reraise=True,
        ):
            with attempt:
                return await sweep()
        raise AssertionError("unreachable")

    async def member_list(self, urls: Sequence[str]) -> tuple[MemberClient, list[Member]]:
        """MemberList from the first voting member that answers (learners refuse it)."""
        return await self.first_answer(urls, lambda c: c.member_list())

    async def statuses(self, urls: Iterable[str], timeout: float | None = None) -> dict[str, Status | None]:
        """Status of every URL at once; None where the member did not answer."""
        urls = list(dict.fromkeys(urls))

        async def one(url: str) -> Status | None:
            try:
                return await self.member(url).status(timeout=timeout)
            except EtcdClientError:
                return None

        results = await asyncio.gather(*(one(u) for u in urls))
        return dict(zip(urls, results, strict=True))
