"""The membership lock's pure parts (fault d): who holds it, and when its fence lets a mutation go."""

from __future__ import annotations

import pytest

from raftset.sidecar.io.etcdlock import FENCE_MARGIN_S, LockKey, fence_problem, holder, predecessor

pytestmark = pytest.mark.unit

A, B, C = LockKey(b"p/a", 10), LockKey(b"p/b", 12), LockKey(b"p/c", 15)


def test_the_oldest_key_holds_and_each_waiter_watches_the_one_ahead() -> None:
    assert holder([C, A, B]) == A
    assert holder([]) is None
    assert predecessor([C, A, B], A.key) is None
    assert predecessor([C, A, B], B.key) == A
    assert predecessor([C, A, B], C.key) == B
    assert predecessor([A, B], C.key) is None  # ours is gone: the caller sees that in the keys


def test_the_fence_passes_only_for_the_holder_with_time_left_for_the_mutation() -> None:
    assert fence_problem([A, B], A.key, ttl_left=15, elapsed=0.2, needed=5.0) is None
    assert fence_problem([A, B], A.key, ttl_left=0, elapsed=0.0, needed=5.0) == "the lock's lease expired or was revoked"
    assert fence_problem([A, B], A.key, ttl_left=-1, elapsed=0.0, needed=5.0) == "the lock's lease expired or was revoked"
    assert fence_problem([B], A.key, ttl_left=15, elapsed=0.0, needed=5.0) == "the lock key was deleted"
    assert fence_problem([A, B], B.key, ttl_left=15, elapsed=0.0, needed=5.0) == "another holder is ahead of us"


def test_the_fence_counts_the_time_since_the_renewal_was_sent() -> None:
    needed = 5.0
    edge = needed + FENCE_MARGIN_S
    assert fence_problem([A], A.key, ttl_left=7, elapsed=7 - edge, needed=needed) is None
    problem = fence_problem([A], A.key, ttl_left=7, elapsed=7 - edge + 0.1, needed=needed)
    assert problem == f"only {edge - 0.1:.1f}s left on the lock's lease, the change needs {edge:.1f}s"
