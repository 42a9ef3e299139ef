"""The linearizability checker (lincheck) and the watch checks against a real 3-member cluster:
a clean run passes, and the same run doctored (a stale read, a lost acknowledged write, a
reordered watch) is rejected."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.harness.history import lost_write, stale_read, stale_serializable_read
from tests.harness.scenarios import grow
from tests.harness.traffic import END_KEY, Traffic, lincheck
from tests.harness.watchcheck import reordered, watch_problems

pytestmark = pytest.mark.etcd


def record(traffic: Traffic, seconds: float) -> Traffic:
    traffic.start()
    assert traffic.started_clients.wait(10), traffic.errors[-3:]
    time.sleep(seconds)
    return traffic.stop()


async def test_a_clean_run_passes_and_its_doctored_copies_are_rejected(make_lab, tmp_path: Path) -> None:
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    endpoints = [lab.pod(o).client_url for o in range(3)]
    traffic = record(Traffic(endpoints, clients=8, watchers=2, tls=lab.client_tls()), 3.0)
    ops = traffic.history
    print(f"{len(ops)} operations from revision {traffic.start_revision} "
          f"(the sidecars' lock writes came before), {sum(op.unknown for op in ops)} unknown")

    kinds = Counter((op.op, op.serializable) for op in ops if not op.unknown)
    assert {op.client for op in ops} >= set(range(8))
    assert {op.key for op in ops if op.client >= 8} == {f"/traffic/{k}" for k in range(traffic.keys)} | {
        f"/traffic/{END_KEY}"}  # the final reads, then the end mark
    end = ops[-1]
    assert (end.key, end.op, end.acknowledged_write) == (f"/traffic/{END_KEY}", "put", True), end
    assert all(events[-1].revision == end.revision for events in traffic.events), "every watcher delivered the end"
    assert all(kinds[kind] >= 10 for kind in (("put", False), ("get", False), ("get", True),
                                              ("delete", False), ("cas", False))), kinds
    assert any(op.succeeded for op in ops if op.op == "cas") and any(
        not op.succeeded for op in ops if op.op == "cas" and not op.unknown), "both outcomes of a compare-and-swap"
    assert {op.endpoint for op in ops} == set(endpoints)

    clean = lincheck(ops, tmp_path / "clean.html")
    assert clean.linearizable, clean.summary
    assert traffic.watch_problems() == []
    assert traffic.settled() == [op for op in ops if not (op.unknown and op.op in ("put", "cas"))
                                 or any((e.key, e.value) == (op.key, op.value) for e in traffic.events[0])]
    assert all(len(events) >= 20 for events in traffic.events), [len(e) for e in traffic.events]

    stale = lincheck(stale_read(ops), tmp_path / "stale-read.html")
    print("stale read:", stale.summary)
    assert not stale.linearizable and "no linearization of key(s)" in stale.summary
    assert stale.html is not None and stale.html.stat().st_size > 1000

    lost = lincheck(lost_write(ops), tmp_path / "lost-write.html")
    print("lost write:", lost.summary)
    assert not lost.linearizable and "no linearization of key(s)" in lost.summary
    assert lost.html is not None and lost.html.is_file()

    lagging = lincheck(stale_serializable_read(ops), tmp_path / "stale-serializable-read.html")
    print("stale serializable read:", lagging.summary)
    assert not lagging.linearizable and "serializable read(s) inconsistent" in lagging.summary

    problems = watch_problems(reordered(traffic.events[0]), ops, traffic.start_revision, traffic.horizon())
    print("reordered watch:", problems)
    assert problems and all("out of order" in p for p in problems), problems


async def test_traffic_pinned_to_a_paused_member_records_unknown_outcomes_and_stays_linearizable(
        make_lab, tmp_path: Path) -> None:
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    pinned = lab.pod(2)
    store = pinned.store
    assert store is not None
    traffic = Traffic([lab.pod(o).client_url for o in range(3)], pin=pinned.client_url, prefix="/pinned/",
                      timeout=0.5, tls=lab.client_tls())
    traffic.start()
    try:
        assert traffic.started_clients.wait(10), traffic.errors[-3:]
        time.sleep(1.0)
        store.send_signal(signal.SIGSTOP)  # every call in flight or made now times out
        time.sleep(1.5)
    finally:
        store.send_signal(signal.SIGCONT)
    time.sleep(1.0)
    traffic.stop()
    ops = traffic.history
    unknown = [op for op in ops if op.unknown]
    print(f"{len(ops)} operations, {len(unknown)} unknown: {Counter(op.op for op in unknown)}")
    assert {op.endpoint for op in ops} == {pinned.client_url}
    assert any(op.is_write for op in unknown), "writes with an unknown outcome are recorded, not dropped"
    assert any("timed out" in e for e in traffic.errors)
    verdict = lincheck(ops, tmp_path / "pinned.html")
    assert verdict.linearizable, verdict.summary
    assert f"({len(unknown)} with unknown outcome)" in verdict.summary
    assert traffic.watch_problems() == []
    lost = lincheck(lost_write(ops), tmp_path / "pinned-lost-write.html")  # unknown outcomes hide no loss
    assert not lost.linearizable, lost.summary
