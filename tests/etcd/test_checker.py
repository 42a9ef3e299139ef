"""The acknowledged-write checker against real etcd: it passes on a healthy cluster and can fail."""

from __future__ import annotations

import signal
import time

import pytest

from tests.harness.checker import Ack, Writer, check
from tests.harness.lab import wait_for
from tests.harness.scenarios import check_members, grow

pytestmark = pytest.mark.etcd


async def test_every_acknowledged_write_reads_back_and_hashes_agree(make_lab) -> None:
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    writer = Writer([lab.pod(o).client_url for o in range(3)])
    writer.start()
    wait_for(lambda: writer.ok > 30, 10, "writer running")
    writer.stop()
    verdict = await check_members(lab, writer, 0, 1, 2)
    assert verdict.acknowledged == writer.ok
    assert len({h.member_id for h in verdict.hashes.values()}) == 3  # each member answered for itself


async def test_a_writer_with_a_deadline_retries_a_write_and_fails_it_only_past_the_deadline(make_lab) -> None:
    lab = make_lab(replicas=1)
    await grow(lab, 1)
    store = lab.pod(0).store
    assert store is not None
    writer = Writer([lab.pod(0).client_url], timeout=0.3, deadline=2.0)
    writer.start()
    try:
        for pause in (1.0, 3.5):  # shorter than the deadline, then longer
            acked = writer.ok
            wait_for(lambda: writer.ok > acked + 10, 10, "writes flowing")
            store.send_signal(signal.SIGSTOP)
            time.sleep(pause)
            store.send_signal(signal.SIGCONT)
            acked = writer.ok
            wait_for(lambda: writer.ok > acked + 10, 10, "writes flowing again")
            if pause < writer.deadline:
                assert writer.failed == 0, (pause, writer.errors[-3:])
            else:
                assert writer.failed >= 1, (pause, writer.errors[-3:])
            assert writer.longest_stall >= pause - 0.5, (pause, writer.longest_stall)
    finally:
        store.send_signal(signal.SIGCONT)
        writer.stop()
    assert any("timed out" in e for e in writer.errors), "the paused member's attempts timed out and were retried"
    await check_members(lab, writer, 0)


async def test_an_acknowledged_write_that_is_missing_fails_the_check(make_lab) -> None:
    lab = make_lab(replicas=1)
    await grow(lab, 1)
    await lab.put("/writer/000000001", "1")
    with pytest.raises(AssertionError, match="acknowledged writes lost"):
        await check([lab.pod(0).client_url], {"/writer/000000002": Ack("2", 3)})


async def test_members_that_disagree_fail_the_check(make_lab) -> None:
    # Two one-member clusters at the same revision with different values stand in for a
    # member whose data diverged.
    first, second = make_lab(replicas=1), make_lab(replicas=1)
    for lab, value in ((first, "a"), (second, "b")):
        await grow(lab, 1)
        await lab.put("/writer/000000001", value)
    with pytest.raises(AssertionError, match="members disagree"):
        await check([first.pod(0).client_url, second.pod(0).client_url], {}, timeout=10)
