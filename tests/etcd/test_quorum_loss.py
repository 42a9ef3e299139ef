"""Quorum loss: a majority of members is gone with its data; the most up-to-date survivor starts
alone from its own data and the others rejoin, one learner at a time (issue 12, item 2).

The tests play the operator's part (read the survivors' heartbeat Leases, choose, record the
recovery on the workload, restart the pods) and let the real sidecars and real etcd do the rest.

Which acknowledged writes can be lost. A write is acknowledged once a quorum holds it in its
log and the leader has committed it. A survivor holds a committed entry only if it was in that
entry's quorum or received it since, and knows it is committed only once the leader told it
(the next append or heartbeat). `--force-new-cluster` keeps exactly the entries up to the
commit index the survivor persisted and drops the rest of its log. So the acknowledged writes
lost are exactly those above the chosen survivor's committed index: none when the survivor had
caught up with the leader (test 2). A member acknowledges a put only once it has applied it
itself, so a write the survivor acknowledged is never lost: when the loss hits a running writer
that asks the survivor first (test 1), only a put that failed on the survivor and was then
acknowledged by a lost member can be lost, at most one per failure recorded before the loss
(normally none). Choosing the survivor with the highest committed index loses the fewest of them: its
committed prefix holds every other survivor's (raftset.quorum_loss).
"""

from __future__ import annotations

import pytest

from raftset.sidecar.io.etcdclient import MemberClient
from raftset.quorum_loss import choose
from tests.harness.checker import PREFIX, Writer, check
from tests.harness.quorum import (Clock, end_recovery, frozen_revision, lose, lost_by_revision, record_recovery,
                                  survivors)
from tests.harness.scenarios import grow
from tests.harness.waiting import await_for, wait_for

pytestmark = pytest.mark.etcd


async def test_one_survivor_of_three_restarts_alone_keeps_what_it_committed_and_the_others_rejoin(make_lab) -> None:
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    survivor_id = (await lab.status(0)).member_id
    writer = Writer([lab.pod(o).client_url for o in range(3)], lab.client_tls())
    writer.start()
    wait_for(lambda: writer.ok > 100, 30, "the writer running")
    clock = Clock()
    lose(lab, 1, 2)  # the loss hits a running writer
    clock.lost = clock.now()
    # Every put the writer sent to 1 or 2 followed a put that failed on 0 (it asks 0 first); the
    # last of them went out before they were killed, so its failure is already recorded.
    failed_on_the_survivor_before = len(writer.errors)

    [survivor] = survivors(lab, 0)
    assert choose([survivor]) == survivor
    held = await frozen_revision(lab, 0)  # without quorum nothing more can be acknowledged
    acked_before = dict(writer.acked)
    expected_lost = lost_by_revision(acked_before, held)
    record = record_recovery(lab, survivor)
    clock.started = clock.now()
    ok_at_start = writer.ok

    # The operator restarts the survivor's pod. Its first try is SIGKILLed right after the
    # sidecar chose to start alone: the next sidecar reads the same record and resumes.
    survivor_pod = lab.pod(0)
    survivor_pod.kill()
    survivor_pod.start_sidecar()
    survivor_pod.wait_startup()
    await lab.logged("recovery: force", 0)
    survivor_pod.kill()
    survivor_pod.start_sidecar()
    survivor_pod.wait_startup()
    survivor_pod.start_store()
    wait_for(lambda: writer.ok > ok_at_start, 60, "writes accepted by the one-member cluster")
    clock.writable = clock.now()
    wait_for(lambda: survivor_pod.marker().get("recovered") == record.id, 30, "the survivor's marker records it")
    assert [m.id for m in await lab.members(0)] == [survivor_id], "one member: the survivor, with its own id"

    lab.pod(1).start(timeout=60)
    lab.pod(1).wait_ready(60)
    await lab.wait_voting(2, 60, 0, 1)
    # A restart of the survivor now is an ordinary restart, never a second forced cluster.
    survivor_pod.kill()
    survivor_pod.start_sidecar()
    survivor_pod.wait_startup()
    survivor_pod.start_store()
    assert "already restarted alone" in survivor_pod.log_text()
    await lab.wait_voting(2, 60, 0, 1)
    lab.pod(2).start(timeout=60)
    lab.pod(2).wait_ready(60)
    await lab.wait_voting(3, 60)
    clock.full = clock.now()
    end_recovery(lab)
    wait_for(lambda: writer.ok > ok_at_start + 100, 30, "the writer writing on the grown cluster")
    writer.stop()

    print(clock.report("quorum loss, 1 survivor of 3, writer running", len(expected_lost), len(acked_before)))
    kept = {k: a for k, a in writer.acked.items() if k not in expected_lost}
    verdict = await check([lab.pod(o).client_url for o in range(3)], kept, lab.client_tls())
    assert verdict.acknowledged == len(kept) > 200
    async with MemberClient(lab.pod(0).client_url, lab.client_tls()) as client:
        _, keys = await client.get_prefix(PREFIX)
    assert not set(expected_lost) & set(keys), "exactly the writes above the survivor's commit index are gone"
    assert len(expected_lost) <= failed_on_the_survivor_before, (
        f"{len(expected_lost)} acknowledged writes lost, but only {failed_on_the_survivor_before} puts went past "
        "the survivor before the loss: the survivor lost writes it had acknowledged itself")
    assert len(expected_lost) < 20, "only the writes in flight when the loss hit"


async def test_two_survivors_of_five_the_most_up_to_date_one_is_chosen_even_if_not_the_lowest_ordinal(
        make_lab) -> None:
    lab = make_lab(replicas=5)
    await grow(lab, 5)
    lab.pod(0).kill()  # stopped early, its data kept: it misses what follows
    writer = Writer([lab.pod(o).client_url for o in range(1, 5)], lab.client_tls())
    writer.start()
    wait_for(lambda: writer.ok > 100, 30, "the writer running")
    writer.stop()

    async def caught_up() -> bool:  # survivor 1 knows everything the leader committed
        leader = await lab.leader_ordinal(1, 2, 3, 4)
        return leader is not None and (await lab.status(1)).raft_index >= (await lab.status(leader)).raft_index
    await await_for(caught_up, 30, "ordinal 1 caught up with the leader")
    lose(lab, 2, 3, 4)
    clock = Clock(lost=Clock.now())
    lab.pod(0).start_sidecar()  # comes back from its data into a cluster without quorum
    lab.pod(0).wait_startup()
    lab.pod(0).start_store()

    found = survivors(lab, 0, 1)
    chosen = choose(found)
    assert chosen is not None and chosen.pod == lab.pod(1).name, found
    assert found[0].committed < found[1].committed
    record = record_recovery(lab, chosen)
    clock.started = clock.now()
    for ordinal in (1, 0):  # the operator restarts the survivors' pods
        lab.pod(ordinal).kill()
    lab.pod(1).start_sidecar()
    lab.pod(1).wait_startup()
    lab.pod(1).start_store()
    lab.pod(1).wait_ready(60)
    clock.writable = clock.now()
    lab.pod(0).start_sidecar()
    lab.pod(0).wait_startup(60)
    lab.pod(0).start_store()
    lab.pod(0).wait_ready(60)
    moved = [p for p in lab.pod(0).data_dir.parent.iterdir() if p.name.startswith(f"data.quorum-loss-{record.id}")]
    assert moved, "the stale survivor's data is kept aside, not deleted"
    for ordinal in (2, 3, 4):
        lab.pod(ordinal).start(timeout=90)
        lab.pod(ordinal).wait_ready(60)
    await lab.wait_voting(5, 90)
    clock.full = clock.now()
    end_recovery(lab)

    print(clock.report("quorum loss, 2 survivors of 5, survivor caught up", 0, len(writer.acked)))
    verdict = await check([lab.pod(o).client_url for o in range(5)], writer.acked, lab.client_tls())
    assert verdict.acknowledged == len(writer.acked) > 100
