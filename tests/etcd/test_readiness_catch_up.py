"""Readiness asks that a member has applied what the cluster had committed a while ago (readiness.CATCH_UP_S).

A member that applies nothing while its linearizable reads go through (Xline's leader answers them:
docs/engines.md) is then not ready; the rule must never take a healthy member that keeps up under
writes, or one that was paused and caught up, out of the client Service. This checks the second
half on both engines; the first is in the unit tier (`behind`, and the heartbeat shell).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from raftset.sidecar.pure.readiness import CATCH_UP_S
from tests.harness.engines import EngineUnderTest
from tests.harness.lab import http_get, wait_for
from tests.harness.scenarios import check_members, grow, writing

pytestmark = pytest.mark.etcd


@pytest.mark.per_engine
async def test_members_that_keep_up_under_writes_stay_ready_past_the_catch_up_window(
        make_lab, engine_under_test: EngineUnderTest) -> None:
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    for ordinal in range(3):
        lab.pod(ordinal).wait_ready()
    writer = writing(lab, 0, 1, 2)
    leader = await lab.leader_ordinal()
    follower = next(o for o in range(3) if o != leader)
    store = lab.pod(follower).store
    assert store is not None
    # A follower paused for a few seconds falls behind, then catches up well within the window.
    os.kill(store.pid, signal.SIGSTOP)
    time.sleep(3)
    os.kill(store.pid, signal.SIGCONT)
    unready: list[tuple[int, str]] = []
    deadline = time.monotonic() + CATCH_UP_S + 15
    while time.monotonic() < deadline:
        for ordinal in range(3):
            code, body = http_get(f"{lab.pod(ordinal).sidecar_url}/readyz")
            if code != 200 and "behind the cluster" in body:
                unready.append((ordinal, body))
        time.sleep(1)
    writer.stop()
    assert writer.ok > 100, "the writes must have moved the cluster on during the window"
    assert unready == [], unready[:3]
    wait_for(lambda: all(lab.pod(o).ready() for o in range(3)), 30, "every member ready")
    await check_members(lab, writer, 0, 1, 2)  # raises on a lost write or differing hashes
