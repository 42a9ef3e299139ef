"""kopf's log lines the operator drops: the success of every drift check and alarm ring."""

from __future__ import annotations

import logging

import pytest

from raftset.operator.logs import DropRoutine, routine

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("message", "dropped"), [
    ("Handler 'drift-apps-v1-statefulsets' succeeded.", True),
    ("Handler 'pods-ring' succeeded.", True),
    ("Handler 'leases-ring' succeeded.", True),
    ("Handler 'etcd-annotations' succeeded.", True),
    ("Handler 'etcd-create' succeeded.", False),
    ("Handler 'etcd-update/spec' succeeded.", False),
    ("Handler 'pods-ring' failed with an exception. Will retry.", False),
    ("Creation is processed: 1 succeeded; 0 failed.", False),
])
def test_only_the_routine_successes_are_dropped(message: str, dropped: bool) -> None:
    assert routine(message) is dropped


def test_the_filter_keeps_what_is_not_routine() -> None:
    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("kopf.objects", logging.INFO, __file__, 1, message, None, None)

    assert not DropRoutine().filter(record("Handler 'xline-annotations' succeeded."))
    assert DropRoutine().filter(record("Handler 'xline-delete' succeeded."))
