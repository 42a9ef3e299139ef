"""Where the engines' etcd APIs differ, checked against the real processes (docs/engines.md)."""

from __future__ import annotations

import socket

import pytest

from raftset.etcdclient import EtcdClientError, MemberClient, Refusal
from tests.harness.engines import EngineUnderTest
from tests.harness.lab import wait_for
from tests.harness.waiting import await_for
from tests.harness.scenarios import check_members, grow, writing

pytestmark = pytest.mark.etcd


def _serving(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.lifecycle
async def test_a_member_removed_behind_its_back_stops_serving(make_lab, engine_under_test: EngineUnderTest) -> None:
    """etcd's removed member exits; Xline's closes its ports and keeps running, which is what
    the store container's TCP liveness probe on the client port catches."""
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    leader = await lab.leader_ordinal()
    victim = next(o for o in range(3) if o != leader)
    victim_id = (await lab.status(victim)).member_id
    staying = [o for o in range(3) if o != victim]
    writer = writing(lab, *staying)

    async def removed() -> bool:
        # etcd refuses ("unhealthy cluster") while a voter connected less than 5 s ago:
        # nothing changed then, so asking again is safe.
        async with MemberClient(lab.pod(leader).client_url, lab.client_tls()) as c:
            try:
                await c.remove(victim_id)
            except EtcdClientError as exc:
                if exc.refusal is Refusal.MEMBER_NOT_FOUND:  # an earlier reply was lost
                    return True
                if exc.refusal is not Refusal.UNHEALTHY:
                    raise
                return False
        return True
    await await_for(removed, 30, f"MemberRemove of ordinal {victim}")
    store = lab.pod(victim).store
    assert store is not None
    wait_for(lambda: not _serving(lab.pod(victim).ip, 2379), 30, f"ordinal {victim}'s client port closed")
    if engine_under_test.engine.capabilities.removed_member_exits:
        wait_for(lambda: store.poll() is not None, 30, f"ordinal {victim}'s store exited")
    else:
        assert store.poll() is None, "this engine's removed member was expected to keep running"
    written = writer.ok
    wait_for(lambda: writer.ok > written + 20, 20, "writes acknowledged by the two that stay")
    writer.stop()
    await check_members(lab, writer, *staying)
