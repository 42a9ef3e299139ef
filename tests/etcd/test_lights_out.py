"""Lights-out: every member stops at once, as on a power loss, and the cluster re-forms by itself.

The data dirs survive (PVCs); every store and sidecar is SIGKILLed together; then all pods
start together, as the workload's Parallel pod management starts them. The cluster must come
back with the same member IDs and every acknowledged write, with no human action.
"""

from __future__ import annotations

import pytest

from tests.harness.checker import Writer
from tests.harness.lab import Lab, http_get
from tests.harness.scenarios import check_members, grow
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.etcd


@pytest.mark.lifecycle
async def test_every_member_killed_at_once_comes_back_with_its_id_and_every_acknowledged_write(make_lab) -> None:
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    ids = {m.name: m.id for m in await lab.members(0, 1, 2)}
    writer = Writer([lab.pod(o).client_url for o in range(3)], lab.client_tls())
    writer.start()
    wait_for(lambda: writer.ok > 100, 30, "the writer running")
    for ordinal in range(3):  # the power goes: no hook, no hand-off, no grace
        lab.pod(ordinal).kill()
    writer.stop()
    assert writer.ok > 100

    for ordinal in range(3):  # the power comes back: every pod at once, none waits for another
        lab.pod(ordinal).start_sidecar()
    for ordinal in range(3):
        lab.pod(ordinal).wait_startup()
        lab.pod(ordinal).start_store()
    try:
        for ordinal in range(3):
            lab.pod(ordinal).wait_ready(60)
    except AssertionError:
        engine_fault_reported(lab)
        raise
    await lab.wait_voting(3, 60)
    assert {m.name: m.id for m in await lab.members(0, 1, 2)} == ids, "the same members, not new ones"
    for ordinal in range(3):
        assert "join: rejoin" in lab.pod(ordinal).log_text()
    verdict = await check_members(lab, writer, 0, 1, 2)
    assert verdict.acknowledged == len(writer.acked) > 100


# What Xline 0.6.1+71479a4f logs when it drops the tail of its own Raft log on start (docs/engines.md,
# "Lights-out on Xline"): a stale AppendEntries truncated a follower's in-memory log and the
# re-sent entries went into its WAL a second time; recovery stops at the first repeated index.
XLINE_WAL_TRUNCATED = "WAL corrupted: The recovered logs are not continue"


def engine_fault_reported(lab: Lab) -> None:
    """After a failed wait for readiness: when a store truncated its own log on start, check that
    raftset said so (every member unready, naming the failed read) and fail naming the truncation.
    Without that evidence it returns, and the wait's own failure stands."""
    truncated = [p.name for p in lab.pods.values() if XLINE_WAL_TRUNCATED in p.store_log_text()]
    if not truncated:
        return
    for pod in lab.pods.values():
        code, body = http_get(f"{pod.sidecar_url}/readyz")
        assert code == 503 and "a linearizable read failed" in body, (pod.name, code, body)
    raise AssertionError(f"the engine truncated the Raft log of {', '.join(truncated)} on restart "
                         f"({XLINE_WAL_TRUNCATED!r}) and the cluster no longer commits; raftset reported "
                         "every member not ready (docs/engines.md, \"Lights-out on Xline\")")
