"""Leader election between operator replicas: one `coordination.k8s.io` Lease, one holder.

Two replicas run (kustomize/manager); only the Lease's holder runs kopf, so exactly one
acts. The other waits for the Lease to expire, takes it and starts kopf, which resumes any
half-done scale from what is in the API (the operator keeps no state that matters in
memory). This is client-go's leader election, kept small:

- `decide` (pure) says what a replica does with the Lease it read;
- `Elector` (the shell) reads and writes the Lease with optimistic concurrency (a write on a
  stale resourceVersion fails with 409, so two replicas can never both take it);
- a holder that cannot renew within `renew_deadline` stops the process at once: a replica
  that may have lost the Lease must not act one more step.

kopf's own peering was not used: replicas of equal priority both keep running there (it
only warns), so exactly-one-acts would hang on a priority per replica.
"""

from __future__ import annotations

import enum
import http.server
import logging
import os
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("raftset.operator.election")

LEASE_NAME = "raftset-operator"


@dataclass(frozen=True)
class Timing:
    """client-go's defaults: a dead holder is replaced within lease_duration + retry_period."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("need 0 < retry_period < renew_deadline < lease_duration "
                             f"(got {self.retry_period}, {self.renew_deadline}, {self.lease_duration})")

    @classmethod
    def from_env(cls) -> Timing:
        env = os.environ
        return cls(lease_duration=float(env.get("RAFTSET_LEASE_DURATION_SECONDS", cls.lease_duration)),
                   renew_deadline=float(env.get("RAFTSET_LEASE_RENEW_DEADLINE_SECONDS", cls.renew_deadline)),
                   retry_period=float(env.get("RAFTSET_LEASE_RETRY_SECONDS", cls.retry_period)))


@dataclass(frozen=True)
class Record:
    """What the Lease says about its holder."""

    holder: str | None
    renewed: datetime | None
    duration: float
    transitions: int = 0


class Action(enum.Enum):
    CREATE = "create"  # no Lease yet
    RENEW = "renew"  # we hold it
    TAKE = "take"  # free or expired: take it over
    WAIT = "wait"  # someone else holds it


def expired(record: Record, now: datetime) -> bool:
    """No holder, or no renewal within the holder's own lease duration."""
    if not record.holder or record.renewed is None:
        return True
    return now - record.renewed > timedelta(seconds=record.duration)


def decide(record: Record | None, me: str, now: datetime) -> Action:
    if record is None:
        return Action.CREATE
    if record.holder == me:
        return Action.RENEW
    return Action.TAKE if expired(record, now) else Action.WAIT


def read_record(lease: client.V1Lease) -> Record:
    spec = lease.spec or client.V1LeaseSpec()
    renewed = spec.renew_time or spec.acquire_time
    if renewed is not None and renewed.tzinfo is None:
        renewed = renewed.replace(tzinfo=timezone.utc)
    return Record(holder=spec.holder_identity, renewed=renewed,
                  duration=float(spec.lease_duration_seconds or 0), transitions=spec.lease_transitions or 0)


def lease_spec(me: str, now: datetime, timing: Timing, previous: Record | None) -> client.V1LeaseSpec:
    """The spec a holder writes: a take-over counts a transition and restamps acquireTime."""
    taking = previous is None or previous.holder != me
    transitions = (previous.transitions if previous else 0) + (1 if previous is not None and taking else 0)
    return client.V1LeaseSpec(holder_identity=me, lease_duration_seconds=max(1, round(timing.lease_duration)),
                              renew_time=now, lease_transitions=transitions,
                              acquire_time=now if taking else None)


class Elector:
    """Acquires and keeps the operator's Lease for `identity`."""

    def __init__(self, api: client.ApiClient, namespace: str, identity: str, timing: Timing,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.leases = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.identity = identity
        self.timing = timing
        self.clock = clock

    def try_once(self) -> bool:
        """One round: read, decide, write. True when we hold the Lease afterwards."""
        now = self.clock()
        try:
            lease = self.leases.read_namespaced_lease(LEASE_NAME, self.namespace)
        except ApiException as error:
            if error.status != 404:
                raise
            lease = None
        record = read_record(lease) if lease is not None else None
        action = decide(record, self.identity, now)
        if action is Action.WAIT:
            return False
        spec = lease_spec(self.identity, now, self.timing, record)
        if action is Action.RENEW:
            spec.acquire_time = (lease.spec.acquire_time if lease is not None else None) or now
        try:
            if lease is None:
                self.leases.create_namespaced_lease(self.namespace, client.V1Lease(
                    metadata=client.V1ObjectMeta(name=LEASE_NAME, namespace=self.namespace), spec=spec))
            else:
                lease.spec = spec  # replace carries the resourceVersion we read: a race is a 409
                self.leases.replace_namespaced_lease(LEASE_NAME, self.namespace, lease)
        except ApiException as error:
            if error.status in (409, 422):
                return False  # another replica wrote first
            raise
        if action is not Action.RENEW:
            log.info("operator Lease %s/%s acquired by %s (%s)", self.namespace, LEASE_NAME, self.identity,
                     "created" if action is Action.CREATE else f"taken from {record.holder if record else None}")
        return True

    def acquire(self) -> None:
        """Block until this replica holds the Lease."""
        announced = False
        while True:
            try:
                if self.try_once():
                    return
            except ApiException as error:
                log.warning("operator Lease: %s", error.reason)
            if not announced:
                log.info("standing by: another replica holds the operator Lease %s/%s", self.namespace, LEASE_NAME)
                announced = True
            time.sleep(self.timing.retry_period)

    def keep(self, on_lost: Callable[[], None]) -> threading.Thread:
        """Renew every retry_period; if no renewal succeeds within renew_deadline, `on_lost`."""
        def run() -> None:
            last_ok = time.monotonic()
            while True:
                time.sleep(self.timing.retry_period)
                try:
                    if self.try_once():
                        last_ok = time.monotonic()
                        continue
                    log.error("operator Lease %s/%s is held by another replica", self.namespace, LEASE_NAME)
                    on_lost()
                    return
                except Exception as error:  # noqa: BLE001 - any failure to renew counts against the deadline
                    log.warning("operator Lease renewal failed: %s", error)
                if time.monotonic() - last_ok > self.timing.renew_deadline:
                    log.error("operator Lease not renewed for %.0fs: stopping", self.timing.renew_deadline)
                    on_lost()
                    return
        thread = threading.Thread(target=run, name="lease-renewal", daemon=True)
        thread.start()
        return thread

    def release(self) -> None:
        """On a clean stop: expire our Lease now, so the standby takes over without waiting."""
        try:
            lease = self.leases.read_namespaced_lease(LEASE_NAME, self.namespace)
            if lease.spec and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                self.leases.replace_namespaced_lease(LEASE_NAME, self.namespace, lease)
        except ApiException as error:
            log.warning("operator Lease not released: %s", error.reason)


class StandbyHealth:
    """Answers the liveness URL while standing by (kopf serves it once this replica acts)."""

    def __init__(self, liveness_url: str) -> None:
        parts = urllib.parse.urlsplit(liveness_url)
        path = parts.path or "/"

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                ok = self.path.split("?")[0] == path
                self.send_response(200 if ok else 404)
                self.end_headers()
                self.wfile.write(b"standby\n" if ok else b"")

            def log_message(self, *_: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer((parts.hostname or "0.0.0.0", parts.port or 80), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="standby-health", daemon=True)

    def __enter__(self) -> StandbyHealth:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
