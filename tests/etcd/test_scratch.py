"""Xline's snapshot copies in /tmp: the sidecar removes what the store abandoned there.

Past its 5000-entry log cap, an Xline leader can catch a member up only by snapshot, and each
attempt writes a full copy of its database to a new /tmp/snapshot-<uuid> that nothing removes; with
the member down it tries many times a second (docs/engines.md, "Snapshot copies left in /tmp"). In
the lab the store's /tmp is the host's, which is what the sidecar's scratch directory names here.
"""

from __future__ import annotations

import asyncio
import glob
import time

import pytest

from raftset import engines
from raftset.sidecar.io import scratch as disk
from raftset.sidecar.io.etcdclient import MemberClient
from raftset.sidecar.pure.scratch import ABANDONED_AFTER_S, SWEEP_INTERVAL_S
from tests.harness.engines import EngineUnderTest
from tests.harness.lab import Lab, wait_for
from tests.harness.scenarios import grow

pytestmark = pytest.mark.etcd

LOG_CAP = 5000  # entries an Xline leader keeps (crates/utils/src/config.rs; its flag reaches nothing)
SCRATCH = engines.XLINE.scratch
assert SCRATCH is not None
PREFIX = SCRATCH.prefix
PATTERN = f"{SCRATCH.path}/{PREFIX}*"


async def write_past_the_log_cap(lab: Lab, ordinal: int) -> str:
    """LOG_CAP + 200 puts, 50 at a time on one channel; the last value written."""
    async with MemberClient(lab.pod(ordinal).client_url, lab.client_tls()) as client:
        for start in range(0, LOG_CAP + 200, 50):
            await asyncio.gather(*(client.put(f"/fill/{i % 100}", str(i)) for i in range(start, start + 50)))
    return str(LOG_CAP + 199)


def oldest_copy_age() -> float:
    """Seconds since the least recently changed copy in /tmp last changed (0 with none)."""
    return max((time.time() - c.changed for c in disk.entries(SCRATCH.path, PREFIX)), default=0.0)


@pytest.mark.per_engine(having="scratch")
async def test_the_copies_a_leader_leaves_for_a_member_it_cannot_reach_are_removed(
        make_lab, engine_under_test: EngineUnderTest) -> None:
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    leader = await lab.leader_ordinal()
    assert leader is not None
    down = next(o for o in range(3) if o != leader)
    lab.pod(down).kill()
    last = await write_past_the_log_cap(lab, leader)

    def attempts() -> int:
        return lab.pod(leader).store_log_text().count("snapshot to")
    wait_for(lambda: attempts() > 20, 60, "the leader snapshotting for the down member")
    started = attempts()

    def removed() -> float:
        return lab.pod(leader).metrics().get(("raftset_sidecar_scratch_removed_total", ()), 0.0)
    wait_for(lambda: removed() > 0, ABANDONED_AFTER_S + 4 * SWEEP_INTERVAL_S,
             "the leader's sidecar removing abandoned copies")
    # The leader still tries (the member is down), and no copy outlives the age and two sweeps.
    await asyncio.sleep(2 * SWEEP_INTERVAL_S)
    assert attempts() > started
    assert oldest_copy_age() < ABANDONED_AFTER_S + 2 * SWEEP_INTERVAL_S + 5, sorted(glob.glob(PATTERN))[:5]
    assert "scratch: removed" in lab.pod(leader).log_text()
    # What the store serves is untouched.
    assert await lab.get(f"/fill/{int(last) % 100}", leader, serializable=False) == last.encode()
