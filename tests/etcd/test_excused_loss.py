"""The quorum loss's excused-loss model (checker.ExcusedLoss) through the real linearizability
checker, on hand-written histories: the write a lost member acknowledged above the survivor's
revision, gone after the recovery, is excused; the same write seen by a read before it vanished is
not (that read saw time travel), nor is the same loss of a write the survivor acknowledged.
No store runs: lincheck alone, in the tier that builds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.checker import ExcusedLoss
from tests.harness.history import Op
from tests.harness.traffic import lincheck

pytestmark = pytest.mark.etcd

SURVIVOR, LOST = "http://kv-0:2379", "http://kv-1:2379"
LOSS = ExcusedLoss(survivor_revision=10, lost_endpoints=frozenset({LOST}))
KEY = "/traffic/0"


def put(client: int, value: str, endpoint: str, call: int, returned: int, revision: int) -> Op:
    return Op(client=client, op="put", key=KEY, call=call, returned=returned, value=value, endpoint=endpoint,
              revision=revision)


def get(client: int, call: int, returned: int, got: str | None, revision: int) -> Op:
    return Op(client=client, op="get", key=KEY, call=call, returned=returned, endpoint=SURVIVOR, revision=revision,
              found=got is not None, got=got or "", mod_revision=10 if got == "a" else 0)


BEFORE = put(0, "a", SURVIVOR, 1, 2, 10)  # the survivor held it
AFTER_RECOVERY = get(2, 20, 21, "a", 12)  # the recovered cluster holds "a" again


def test_a_write_only_a_lost_member_acknowledged_above_the_survivor_may_be_lost(tmp_path: Path) -> None:
    history = [BEFORE, put(1, "b", LOST, 3, 4, 11), AFTER_RECOVERY]
    assert not lincheck(history, tmp_path / "strict.html").linearizable, "without the excuse: a lost write"
    verdict = lincheck(LOSS.history(history), tmp_path / "excused.html")
    assert verdict.linearizable, verdict.summary


def test_the_same_loss_of_a_write_the_survivor_acknowledged_is_not_excused(tmp_path: Path) -> None:
    history = [BEFORE, put(1, "b", SURVIVOR, 3, 4, 11), AFTER_RECOVERY]
    verdict = lincheck(LOSS.history(history), tmp_path / "survivor.html")
    assert not verdict.linearizable, verdict.summary


def test_an_excused_write_someone_read_before_it_vanished_is_time_travel(tmp_path: Path) -> None:
    seen = Op(client=3, op="get", key=KEY, call=5, returned=6, endpoint=LOST, revision=11, found=True, got="b",
              mod_revision=11)
    history = [BEFORE, put(1, "b", LOST, 3, 4, 11), seen, AFTER_RECOVERY]
    verdict = lincheck(LOSS.history(history), tmp_path / "seen.html")
    assert not verdict.linearizable, verdict.summary
