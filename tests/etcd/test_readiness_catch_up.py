"""Readiness asks that a member has applied what the cluster had committed a while ago (readiness.CATCH_UP_S).

A member that applies nothing while its linearizable reads go through (Xline's leader answers them:
docs/engines.md) is then not ready; the rule must never take a healthy member that keeps up under
writes, or one that was paused and caught up, out of the client Service. Both halves on both
engines; the rule itself is in the unit tier (`behind`, and the heartbeat shell).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from raftset.sidecar.io.etcdclient import EtcdClientError, MemberClient
from raftset.sidecar.pure.readiness import CATCH_UP_S
from tests.harness.engines import EngineUnderTest
from tests.harness.lab import Lab, http_get, wait_for
from tests.harness.scenarios import check_members, grow, writing
from tests.harness.traffic import Traffic

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


async def own_revisions(lab: Lab, ordinals: range) -> list[int | None]:
    """Each member's own revision (a serializable read's header), None where it does not answer."""
    found: list[int | None] = []
    for ordinal in ordinals:
        async with MemberClient(lab.pod(ordinal).client_url, lab.client_tls()) as client:
            try:
                found.append(await client.revision(serializable=True))
            except EtcdClientError:
                found.append(None)
    return found


@pytest.mark.per_engine
async def test_a_member_that_stops_applying_leaves_readiness_and_says_how_far_behind(
        make_lab, engine_under_test: EngineUnderTest) -> None:
    """Two members added while clients send to every address, the new ones included (as a client given
    all five addresses does). On Xline 0.6.1 one of them often applies nothing past revision 1 and yet
    passes a linearizable read (its leader answers it: docs/engines.md): such a member must leave
    readiness, saying why, and every member that keeps up must stay ready. etcd's keep up."""
    lab = make_lab(replicas=3, clean_grace=30.0)
    await grow(lab, 3)
    traffic = Traffic([lab.naming.client_url(o) for o in range(5)], watchers=1, timeout=1.0, tls=lab.client_tls())
    traffic.start()
    try:
        time.sleep(5)
        lab.scale(5)
        for ordinal in (3, 4):
            lab.pod(ordinal).start()
            lab.pod(ordinal).wait_ready(90)
        await lab.wait_voting(5)
        time.sleep(5)
        first = await own_revisions(lab, range(5))
        stuck = [o for o in (3, 4) if first[o] is not None and first[0] is not None and first[o] < first[0] // 2]
        # Xline's stall comes and goes (4 of 6 runs here, 2026-11-29): each run checks what it got.
        print(f"{engine_under_test.label}: own revisions {first}, stuck {stuck}")
        if engine_under_test.engine.name != "xline":
            assert stuck == [], first

        def verdicts() -> dict[int, str]:
            return {o: http_get(f"{lab.pod(o).sidecar_url}/readyz")[1] for o in range(5)}
        if stuck:
            wait_for(lambda: all('"ready": false' in verdicts()[o] for o in stuck), CATCH_UP_S + 20,
                     f"the stuck member(s) {stuck} not ready")
            for o in stuck:
                assert "behind the cluster: it has applied up to revision" in verdicts()[o]
        later = verdicts()
        assert all('"ready": true' in later[o] for o in range(5) if o not in stuck), later
    finally:
        traffic.stop()
