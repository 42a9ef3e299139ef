"""Leader election between operator replicas: one `coordination.k8s.io` Lease, one holder.

Two replicas run (kustomize/manager); only the Lease's holder runs kopf, so exactly one
acts. The other waits for the Lease to expire, takes it and starts kopf, which resumes any
half-done scale from what is in the API (the operator keeps no state that matters in
memory). This is client-go's leader election, kept small:

- `decide` (pure) says what a replica does with the Lease it read;
- expiry is counted on the reader's own clock, never from the holder's `renewTime` (two
  nodes' clocks disagree): `observe` notes when this replica first read the Lease's current
  version, and the Lease expires `leaseDurationSeconds` after that, as client-go's
  `observedTime` does;
- `Elector` (the shell) reads and writes the Lease with optimistic concurrency (a write on a
  stale resourceVersion fails with 409, so two replicas can never both take it), every
  request bounded by `Timing.request_timeout`;
- a holder stops acting `renew_deadline` after the start of its last successful renewal
  (`acting_time_left`), whether or not a renewal is still hanging: a watchdog thread ends
  the process then. A standby counts `lease_duration` from a sighting no earlier than that
  start, so the holder has stopped before its Lease can be taken.

kopf's own peering was not used: replicas of equal priority both keep running there (it
only warns), so exactly-one-acts would hang on a priority per replica.
"""

from __future__ import annotations

import copy
import http.server
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable
from datetime import datetime, timezone

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from raftset.operator.pure.election import (LEASE_NAME, LeaderAction, LeaderRecord, LeaderSighting, Timing,
                                            acting_time_left, decide, observe)

log = logging.getLogger("raftset.operator.election")


def read_record(lease: client.V1Lease) -> LeaderRecord:
    spec = lease.spec or client.V1LeaseSpec()
    return LeaderRecord(holder=spec.holder_identity, duration=float(spec.lease_duration_seconds or 0),
                        transitions=spec.lease_transitions or 0)


def lease_spec(me: str, now: datetime, timing: Timing, previous: LeaderRecord | None) -> client.V1LeaseSpec:
    """The spec a holder writes: a take-over counts a transition and restamps acquireTime.

    `renewTime` is for people reading the Lease; no replica's decision reads it."""
    taking = previous is None or previous.holder != me
    transitions = (previous.transitions if previous else 0) + (1 if previous is not None and taking else 0)
    return client.V1LeaseSpec(holder_identity=me, lease_duration_seconds=max(1, round(timing.lease_duration)),
                              renew_time=now, lease_transitions=transitions,
                              acquire_time=now if taking else None)


def _client_without_retries(api: client.ApiClient) -> client.ApiClient:
    """A client of our own: urllib3 retries a timed-out read 3 times by default, which would
    stretch one request's timeout fourfold."""
    configuration = copy.deepcopy(api.configuration)
    configuration.retries = False
    return client.ApiClient(configuration)


class Elector:
    """Acquires and keeps the operator's Lease for `identity`."""

    def __init__(self, api: client.ApiClient, namespace: str, identity: str, timing: Timing,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.leases = client.CoordinationV1Api(_client_without_retries(api))
        self.namespace = namespace
        self.identity = identity
        self.timing = timing
        self.clock = clock  # only for the renewTime people read
        self.monotonic = monotonic  # every duration this replica measures
        self.seen: LeaderSighting | None = None
        self.renewal_started: float | None = None  # the start of our last successful write

    def try_once(self) -> bool:
        """One round: read, decide, write. True when we hold the Lease afterwards."""
        started = self.monotonic()
        timeout = self.timing.request_timeout
        try:
            lease = self.leases.read_namespaced_lease(LEASE_NAME, self.namespace, _request_timeout=timeout)
        except ApiException as error:
            if error.status != 404:
                raise
            lease = None
        record = read_record(lease) if lease is not None else None
        self.seen = observe(self.seen, (lease.metadata.resource_version or "") if lease is not None else "", started)
        action = decide(record, self.identity, self.seen, started)
        if action is LeaderAction.WAIT:
            return False
        now = self.clock()
        spec = lease_spec(self.identity, now, self.timing, record)
        if action is LeaderAction.RENEW:
            spec.acquire_time = (lease.spec.acquire_time if lease is not None else None) or now
        try:
            if lease is None:
                self.leases.create_namespaced_lease(self.namespace, client.V1Lease(
                    metadata=client.V1ObjectMeta(name=LEASE_NAME, namespace=self.namespace), spec=spec),
                    _request_timeout=timeout)
            else:
                lease.spec = spec  # replace carries the resourceVersion we read: a race is a 409
                self.leases.replace_namespaced_lease(LEASE_NAME, self.namespace, lease, _request_timeout=timeout)
        except ApiException as error:
            if error.status in (409, 422):
                return False  # another replica wrote first
            raise
        self.renewal_started = started
        if action is not LeaderAction.RENEW:
            log.info("operator Lease %s/%s acquired by %s (%s)", self.namespace, LEASE_NAME, self.identity,
                     "created" if action is LeaderAction.CREATE else f"taken from {record.holder if record else None}")
        return True

    def acquire(self) -> None:
        """Block until this replica holds the Lease."""
        announced = False
        while True:
            try:
                if self.try_once():
                    return
            except Exception as error:  # noqa: BLE001 - a failed round (refused, timed out) is just retried
                log.warning("operator Lease: %s", error)
            if not announced:
                log.info("standing by: another replica holds the operator Lease %s/%s", self.namespace, LEASE_NAME)
                announced = True
            time.sleep(self.timing.retry_period)

    def keep(self, on_lost: Callable[[], None]) -> threading.Thread:
        """Renew every retry_period; `on_lost` (once) when another replica holds the Lease, or when
        `renew_deadline` passes after the last successful renewal began, even if a renewal still hangs."""
        stopped = threading.Event()
        once = threading.Lock()

        def lose(why: str) -> None:
            with once:
                if stopped.is_set():
                    return
                stopped.set()
            log.error("operator Lease %s/%s: %s", self.namespace, LEASE_NAME, why)
            on_lost()

        def renew() -> None:
            while not stopped.wait(self.timing.retry_period):
                try:
                    if not self.try_once():
                        lose("held by another replica")
                        return
                except Exception as error:  # noqa: BLE001 - any failure to renew counts against the deadline
                    log.warning("operator Lease renewal failed: %s", error)

        def watch() -> None:
            while True:
                assert self.renewal_started is not None, "keep() follows a successful acquire()"
                left = acting_time_left(self.renewal_started, self.monotonic(), self.timing)
                if left <= 0:
                    lose(f"not renewed within {self.timing.renew_deadline:.0f}s: stopping")
                    return
                if stopped.wait(left):
                    return

        threading.Thread(target=renew, name="lease-renewal", daemon=True).start()
        watchdog = threading.Thread(target=watch, name="lease-watchdog", daemon=True)
        watchdog.start()
        return watchdog

    def release(self) -> None:
        """On a clean stop: expire our Lease now, so the standby takes over without waiting."""
        timeout = self.timing.request_timeout
        try:
            lease = self.leases.read_namespaced_lease(LEASE_NAME, self.namespace, _request_timeout=timeout)
            if lease.spec and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                self.leases.replace_namespaced_lease(LEASE_NAME, self.namespace, lease, _request_timeout=timeout)
        except Exception as error:  # noqa: BLE001 - best effort: the Lease expires anyway
            log.warning("operator Lease not released: %s", error)


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
