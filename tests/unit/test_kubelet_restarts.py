"""The stand-in kubelet's restarts and status (tools.devcluster.kubelet): the pod runner applies them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tools.devcluster import kubelet
from tools.devcluster.kubelet import LIVENESS_FAILURES, LIVENESS_PERIOD_S, Backoff, Exit, Liveness

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
    status = kubelet.container_status("etcd", "etcd:3.6", 3, last, running_since=None, backoff=4.0, pod="kv-2")
    assert status["restartCount"] == 3 and status["ready"] is False
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert "back-off 4s" in status["state"]["waiting"]["message"]
    assert status["lastState"]["terminated"]["exitCode"] == 2


def test_a_restarted_container_runs_and_keeps_its_last_exit() -> None:
    status = kubelet.container_status("etcd", "etcd:3.6", 4, Exit(2, T0, T0, "panic"),
                                      running_since=T0 + timedelta(seconds=9), backoff=None, pod="kv-2")
    assert status["state"] == {"running": {"startedAt": "2026-11-23T19:00:09Z"}} and status["ready"] is True
    assert status["lastState"]["terminated"]["message"] == "panic"


def test_one_container_entry_is_replaced_the_others_kept() -> None:
    statuses = [{"name": "etcd", "restartCount": 0}, {"name": "other", "restartCount": 1}]
    replaced = kubelet.with_container(statuses, {"name": "etcd", "restartCount": 2})
    assert replaced == [{"name": "etcd", "restartCount": 2}, {"name": "other", "restartCount": 1}]
    assert kubelet.with_container([], {"name": "etcd"}) == [{"name": "etcd"}]


def test_liveness_kills_only_after_enough_failures_in_a_row() -> None:
    probe, now = Liveness(probed=0.0), 0.0
    assert not probe.due(now + LIVENESS_PERIOD_S / 2) and probe.due(now + LIVENESS_PERIOD_S)
    for _ in range(LIVENESS_FAILURES - 1):
        now += LIVENESS_PERIOD_S
        probe = probe.after(False, now)
        assert not probe.failed
    assert probe.after(True, now).failures == 0, "one success forgives the failures before it"
    assert probe.after(False, now + LIVENESS_PERIOD_S).failed
