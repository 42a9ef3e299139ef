"""The operator's leader election: what a replica does with the Lease it read."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from raftset.operator import election
from raftset.operator.pure.election import LeaderAction, LeaderRecord, LeaderSighting, Timing, decide, observe

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
T0 = 500.0  # a monotonic reading: when this replica first read the Lease's current version
SEEN = LeaderSighting("42", T0)


def held(by: str | None, duration: float = 15) -> LeaderRecord:
    return LeaderRecord(holder=by, duration=duration, transitions=3)


def test_no_lease_is_created() -> None:
    assert decide(None, "a", SEEN, T0) is LeaderAction.CREATE


def test_our_own_lease_is_renewed_even_when_late() -> None:
    assert decide(held("a"), "a", SEEN, T0 + 1) is LeaderAction.RENEW
    assert decide(held("a"), "a", SEEN, T0 + 60) is LeaderAction.RENEW


@pytest.mark.parametrize("unchanged_for,expected", [(0, LeaderAction.WAIT), (14.9, LeaderAction.WAIT), (15, LeaderAction.WAIT),
                                                    (15.1, LeaderAction.TAKE), (120, LeaderAction.TAKE)])
def test_another_holder_is_waited_for_until_its_lease_expires_on_our_clock(unchanged_for: float,
                                                                          expected: LeaderAction) -> None:
    assert decide(held("b"), "a", SEEN, T0 + unchanged_for) is expected


def test_the_holders_own_duration_counts_not_ours() -> None:
    assert decide(held("b", duration=30), "a", SEEN, T0 + 20) is LeaderAction.WAIT


@pytest.mark.parametrize("holder", [None, ""])
def test_a_released_lease_is_free_at_once(holder: str | None) -> None:
    assert decide(held(holder), "a", SEEN, T0) is LeaderAction.TAKE


def test_a_new_version_is_observed_now_and_the_same_version_keeps_its_first_sighting() -> None:
    first = observe(None, "42", T0)
    assert first == SEEN
    assert observe(first, "42", T0 + 10) is first  # a re-read is no renewal
    assert observe(first, "43", T0 + 10) == LeaderSighting("43", T0 + 10)


def test_a_lease_renewed_every_round_never_expires_and_one_that_stops_does_after_its_duration() -> None:
    seen, t = None, T0
    for version in range(20):  # renewed every 2 s for 40 s
        seen = observe(seen, str(version), t)
        assert decide(held("b"), "a", seen, t) is LeaderAction.WAIT
        t += 2
    assert seen is not None
    assert decide(held("b"), "a", observe(seen, "19", T0 + 38 + 15), T0 + 38 + 15) is LeaderAction.WAIT
    assert decide(held("b"), "a", observe(seen, "19", T0 + 38 + 15.1), T0 + 38 + 15.1) is LeaderAction.TAKE


@pytest.mark.parametrize("since,left", [(0, 10), (4, 6), (9.9, 0.1), (10, 0), (11, -1)])
def test_the_holder_acts_for_the_renew_deadline_after_its_last_successful_renewal_began(since: float,
                                                                                       left: float) -> None:
    assert election.acting_time_left(T0, T0 + since, Timing()) == pytest.approx(left)


def test_the_holder_stops_before_any_standby_can_take_its_lease() -> None:
    """A standby sees a renewal no earlier than its round began: the earliest sighting is that start."""
    timing = Timing()
    stop_at = T0 + election.acting_time_left(T0, T0, timing)
    earliest = LeaderSighting("7", T0)
    first_take = next(T0 + tenths / 10 for tenths in range(600)
                      if decide(held("b"), "a", earliest, T0 + tenths / 10) is LeaderAction.TAKE)
    assert first_take - stop_at >= timing.lease_duration - timing.renew_deadline == 5


def test_a_request_gives_up_within_half_the_renew_deadline() -> None:
    assert Timing().request_timeout == 5.0
    assert 2 * Timing(lease_duration=3, renew_deadline=2, retry_period=0.5).request_timeout <= 2


def test_a_take_over_counts_a_transition_and_stamps_the_acquire_time() -> None:
    spec = election.lease_spec("a", NOW, Timing(), held("b"))
    assert (spec.holder_identity, spec.lease_transitions, spec.acquire_time) == ("a", 4, NOW)
    assert spec.lease_duration_seconds == 15 and spec.renew_time == NOW


def test_a_renewal_is_no_transition() -> None:
    spec = election.lease_spec("a", NOW, Timing(), held("a"))
    assert (spec.lease_transitions, spec.acquire_time) == (3, None)


def test_the_first_holder_starts_at_zero_transitions() -> None:
    assert election.lease_spec("a", NOW, Timing(), None).lease_transitions == 0


@pytest.mark.parametrize("values", [(15, 10, 0), (15, 10, 10), (10, 10, 2), (5, 10, 2)])
def test_timings_must_leave_room_to_renew_before_expiry(values: tuple[float, float, float]) -> None:
    with pytest.raises(ValueError, match="retry_period < renew_deadline < lease_duration"):
        Timing(*values)


# --- the shell over a fake Lease API: clocks that disagree, every request bounded ---------------------------

class FakeLeases:
    """The three Lease calls of CoordinationV1Api over one stored Lease, with optimistic concurrency."""

    def __init__(self) -> None:
        self.lease: client.V1Lease | None = None
        self.version = 0
        self.timeouts: list[object] = []  # the `_request_timeout` of every call

    def _stored(self, body: client.V1Lease) -> client.V1Lease:
        self.version += 1
        body = copy.deepcopy(body)
        body.metadata.resource_version = str(self.version)
        self.lease = body
        return copy.deepcopy(body)

    def read_namespaced_lease(self, name: str, namespace: str, **kwargs: object) -> client.V1Lease:
        self.timeouts.append(kwargs.get("_request_timeout"))
        if self.lease is None:
            raise ApiException(status=404)
        return copy.deepcopy(self.lease)

    def create_namespaced_lease(self, namespace: str, body: client.V1Lease, **kwargs: object) -> client.V1Lease:
        self.timeouts.append(kwargs.get("_request_timeout"))
        if self.lease is not None:
            raise ApiException(status=409)
        return self._stored(body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: client.V1Lease,
                                 **kwargs: object) -> client.V1Lease:
        self.timeouts.append(kwargs.get("_request_timeout"))
        assert self.lease is not None
        if body.metadata.resource_version != self.lease.metadata.resource_version:
            raise ApiException(status=409)
        return self._stored(body)


class Clocks:
    """Seconds since the test began, and each replica's wall clock `skew` seconds off."""

    def __init__(self) -> None:
        self.t = 0.0

    def wall(self, skew: float) -> Callable[[], datetime]:
        return lambda: NOW + timedelta(seconds=skew + self.t)

    def monotonic(self) -> float:
        return 1000.0 + self.t


def elector(name: str, leases: FakeLeases, clocks: Clocks, skew: float = 0.0) -> election.Elector:
    made = election.Elector(client.ApiClient(), "ns", name, Timing(), clock=clocks.wall(skew),
                            monotonic=clocks.monotonic)
    made.leases = leases  # type: ignore[assignment]
    return made


HOURS = 3 * 3600


@pytest.mark.parametrize("skew", [-HOURS, HOURS], ids=["holder-hours-behind", "holder-hours-ahead"])
def test_a_skewed_holder_keeps_a_live_lease_and_loses_a_dead_one_on_the_standbys_clock(skew: float) -> None:
    leases, clocks, timing = FakeLeases(), Clocks(), Timing()
    holder, standby = elector("a", leases, clocks, skew), elector("b", leases, clocks)
    assert holder.try_once()
    for _ in range(round(3 * timing.lease_duration / timing.retry_period)):  # three lease durations alive
        assert not standby.try_once(), f"the standby took a live Lease at t={clocks.t:.0f}s"
        clocks.t += timing.retry_period
        assert holder.try_once()
    last_renewal = clocks.t
    taken = None
    for _ in range(round(3 * timing.lease_duration / timing.retry_period)):  # the holder is dead from here
        clocks.t += timing.retry_period
        if standby.try_once():
            taken = clocks.t - last_renewal
            break
    assert taken is not None, "the standby never took a dead holder's Lease"
    # The standby sees the last renewal on its next read (up to a retry period late) and takes
    # the Lease on the first read after a lease duration since then.
    assert timing.lease_duration < taken <= timing.lease_duration + 2 * timing.retry_period
    assert leases.lease is not None and leases.lease.spec.holder_identity == "b"


def test_every_request_is_bounded_by_a_timeout_shorter_than_the_renew_deadline() -> None:
    leases, clocks, timing = FakeLeases(), Clocks(), Timing()
    holder, standby = elector("a", leases, clocks), elector("b", leases, clocks)
    holder.try_once(), standby.try_once(), holder.try_once()
    holder.release()
    assert len(leases.timeouts) == 7  # create (read, create), wait (read), renew and release (read, replace)
    assert all(isinstance(t, (int, float)) and 0 < t and 2 * t <= timing.renew_deadline
               for t in leases.timeouts), leases.timeouts


class HangingLeases(FakeLeases):
    """Every request hangs once `hang` is set (a dead connection), until the test ends."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = threading.Event()
        self.released = threading.Event()
        self.renewals = 0

    def read_namespaced_lease(self, name: str, namespace: str, **kwargs: object) -> client.V1Lease:
        if self.hang.is_set():
            self.released.wait(30)
        return super().read_namespaced_lease(name, namespace, **kwargs)

    def replace_namespaced_lease(self, name: str, namespace: str, body: client.V1Lease,
                                 **kwargs: object) -> client.V1Lease:
        self.renewals += 1
        return super().replace_namespaced_lease(name, namespace, body, **kwargs)


def test_a_holder_whose_renewal_hangs_stops_acting_at_its_renew_deadline() -> None:
    timing = Timing(lease_duration=1.5, renew_deadline=1.0, retry_period=0.2)
    leases = HangingLeases()
    holder = election.Elector(client.ApiClient(), "ns", "a", timing)
    holder.leases = leases  # type: ignore[assignment]
    holder.acquire()
    lost = threading.Event()
    holder.keep(lost.set)
    try:
        deadline = time.monotonic() + 5
        while leases.renewals < 2 and time.monotonic() < deadline:  # the renewal loop ran rounds
            time.sleep(0.05)
        assert leases.renewals >= 2, "the holder never renewed"
        last_renewal_begun_by = time.monotonic()
        leases.hang.set()
        assert lost.wait(timing.lease_duration), "the holder still acts a lease duration after its renewal hung"
        assert time.monotonic() - last_renewal_begun_by < timing.lease_duration
    finally:
        leases.released.set()
