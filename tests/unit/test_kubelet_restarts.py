"""The stand-in kubelet's restarts and status (tools.devcluster.kubelet): the pod runner applies them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tools.devcluster import kubelet
from tools.devcluster.kubelet import STORE_LIVENESS, Backoff, Exit, Probe, ProbeState

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 23, 19, 0, 0, tzinfo=timezone.utc)


def test_the_first_exit_restarts_at_once_then_the_delay_doubles_up_to_the_cap() -> None:
    first, cap = kubelet.BACKOFF_S
    entry, now, waits = Backoff(), 100.0, []
    for _ in range(7):  # the store exits right after each start
        start = entry.start_at(now)
        waits.append(start - now)
        entry, now = entry.started(start), start + 0.1
    assert waits[0] == 0.0
    assert waits[1] == pytest.approx(first - 0.1)
    assert [round(w + 0.1, 6) for w in waits[1:]] == [first, 2 * first, 4 * first, 8 * first, cap, cap]


def test_an_exit_after_the_delay_has_passed_restarts_at_once_and_doubles() -> None:
    entry = Backoff(2.0, 100.0)
    assert entry.start_at(103.0) == 103.0
    assert entry.started(103.0) == Backoff(4.0, 103.0)


def test_a_container_that_ran_longer_than_twice_the_cap_starts_over_from_the_first_delay() -> None:
    first, cap = kubelet.BACKOFF_S
    entry = Backoff(cap, 100.0)
    assert entry.started(100.0 + 2 * cap + 1) == Backoff(first, 100.0 + 2 * cap + 1)


def test_a_failed_exit_reports_error_and_the_end_of_its_log_as_message() -> None:
    log = "\n".join(f"line {i}" for i in range(200)) + '\n{"level":"fatal","msg":"failed to open database"}'
    state = Exit(1, T0, T0 + timedelta(seconds=2), log).terminated()
    assert (state["exitCode"], state["reason"]) == (1, "Error")
    assert (state["startedAt"], state["finishedAt"]) == ("2026-11-23T19:00:00Z", "2026-11-23T19:00:02Z")
    assert state["message"].endswith("failed to open database\"}")
    assert len(state["message"].splitlines()) == kubelet.MESSAGE_LINES
    assert len(state["message"].encode()) <= kubelet.MESSAGE_BYTES


def test_the_message_keeps_the_last_2048_bytes_of_long_lines() -> None:
    message = kubelet.termination_message("x" * 5000 + "\nthe end")
    assert len(message.encode()) == kubelet.MESSAGE_BYTES and message.endswith("the end")


def test_a_clean_exit_is_completed_without_a_message_and_a_signal_is_128_plus_it() -> None:
    assert Exit(0, T0, T0, "bye").terminated() == {
        "exitCode": 0, "reason": "Completed", "startedAt": "2026-11-23T19:00:00Z", "finishedAt": "2026-11-23T19:00:00Z"}
    assert Exit(-9, T0, T0, "").terminated()["exitCode"] == 137


def test_a_container_in_backoff_waits_not_ready_with_its_restarts_and_last_exit() -> None:
    last = Exit(2, T0, T0, "panic")
    status = kubelet.container_status("etcd", "etcd:3.6", 3, last, running_since=None, backoff=4.0, pod="kv-2",
                                      ready=False)
    assert status["restartCount"] == 3 and status["ready"] is False
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert "back-off 4s" in status["state"]["waiting"]["message"]
    assert status["lastState"]["terminated"]["exitCode"] == 2


def test_a_restarted_container_runs_and_keeps_its_last_exit() -> None:
    status = kubelet.container_status("etcd", "etcd:3.6", 4, Exit(2, T0, T0, "panic"),
                                      running_since=T0 + timedelta(seconds=9), backoff=None, pod="kv-2",
                                      ready=True)
    assert status["state"] == {"running": {"startedAt": "2026-11-23T19:00:09Z"}} and status["ready"] is True
    assert status["lastState"]["terminated"]["message"] == "panic"


def test_one_container_entry_is_replaced_the_others_kept() -> None:
    statuses = [{"name": "etcd", "restartCount": 0}, {"name": "other", "restartCount": 1}]
    replaced = kubelet.with_container(statuses, {"name": "etcd", "restartCount": 2})
    assert replaced == [{"name": "etcd", "restartCount": 2}, {"name": "other", "restartCount": 1}]
    assert kubelet.with_container([], {"name": "etcd"}) == [{"name": "etcd"}]


def test_liveness_kills_only_after_enough_failures_in_a_row() -> None:
    probe, period = STORE_LIVENESS, STORE_LIVENESS.period
    state, now = ProbeState.liveness(0.0), 0.0
    assert state.passing and state.due(probe, now), "no initial delay declared: the first probe at the start"
    state = state.after(probe, True, now)
    assert not state.due(probe, now + period / 2) and state.due(probe, now + period)
    for _ in range(probe.failure_threshold - 1):
        now += period
        state = state.after(probe, False, now)
        assert state.passing
    assert state.after(probe, True, now).failures == 0, "one success forgives the failures before it"
    assert not state.after(probe, False, now + period).passing


def test_readiness_starts_failing_and_turns_after_its_thresholds_in_a_row() -> None:
    probe = Probe(8080, "/readyz", period=0.5, failure_threshold=3, success_threshold=2, initial_delay=1.0)
    state = ProbeState.readiness(10.0)
    assert not state.passing, "not ready before a probe passed (kubelet's initial result)"
    assert not state.due(probe, 10.9) and state.due(probe, 11.0), "the initial delay counts from the start"
    state = state.after(probe, True, 11.0)
    assert not state.passing, "one success of the two required"
    state = state.after(probe, True, 11.5)
    assert state.passing
    for at in (12.0, 12.5):
        state = state.after(probe, False, at)
        assert state.passing, "still ready below the failure threshold"
    state = state.after(probe, True, 13.0).after(probe, False, 13.5).after(probe, False, 14.0)
    assert state.passing, "a success in between resets the failures"
    state = state.after(probe, False, 14.5)
    assert not state.passing and state.failures == 3


def test_a_declared_probe_is_read_with_kubelets_defaults_and_scaled() -> None:
    container = {"name": "etcd", "ports": [{"name": "sidecar", "containerPort": 8080}],
                 "readinessProbe": {"httpGet": {"path": "/readyz", "port": "sidecar"}, "periodSeconds": 5,
                                    "failureThreshold": 3, "timeoutSeconds": 5, "initialDelaySeconds": 20},
                 "livenessProbe": {"tcpSocket": {"port": 2379}}}
    assert kubelet.declared_probe(container, "readinessProbe") == Probe(
        8080, "/readyz", period=0.5, failure_threshold=3, success_threshold=1, initial_delay=2.0, timeout=5.0)
    assert kubelet.declared_probe(container, "livenessProbe") == Probe(
        2379, None, period=1.0, failure_threshold=3, success_threshold=1, initial_delay=0.0, timeout=1.0)
    assert kubelet.declared_probe(container, "startupProbe") is None
    with pytest.raises(ValueError, match="does not declare"):
        kubelet.declared_probe({"name": "x", "livenessProbe": {"tcpSocket": {"port": "client"}}}, "livenessProbe")
    with pytest.raises(ValueError, match="not a plain httpGet"):
        kubelet.declared_probe({"name": "x", "livenessProbe": {"exec": {"command": ["true"]}}}, "livenessProbe")


def test_a_running_container_is_ready_only_as_its_probe_says() -> None:
    running = kubelet.container_status("etcd", "etcd:3.6", 0, None, running_since=T0, backoff=None, pod="kv-0",
                                       ready=False)
    assert running["started"] and not running["ready"]
    waiting = kubelet.container_status("etcd", "etcd:3.6", 1, None, running_since=None, backoff=2.0, pod="kv-0",
                                       ready=True)
    assert not waiting["ready"], "a container that does not run is never ready"
