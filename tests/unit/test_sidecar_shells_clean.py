"""The clean shell through its ports (in-memory fakes), and the app's loop table that runs it on the
leader only: an absent member not kept is removed past its grace, under the lock's fence, one per round."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from raftset import contract, nodeloss
from raftset.sidecar.app import Sidecar
from raftset.sidecar.metrics import Metrics
from raftset.sidecar.pure.clean import CONFIRM_S
from raftset.sidecar.shells.clean import CleanShell
from tests.unit.sidecar_data import member, mid, status
from tests.unit.sidecar_ports import FakeKube, FakePeers, FakeRaft, fresh_state, settings, workload

pytestmark = pytest.mark.unit


def four_with_one_gone() -> FakeRaft:
    """demo-0 leads; demo-3 is a voter the workload no longer keeps, and it does not answer."""
    return FakeRaft([member(o) for o in range(4)], {**{mid(o): status(o) for o in range(3)}, mid(3): None})


def clean_shell(tmp_path: Path, raft: FakeRaft, held: list[str], kube: FakeKube | None = None) -> CleanShell:
    config = settings(0, tmp_path)

    async def hold(point: str) -> None:
        held.append(point)

    state = fresh_state(0, phase="started", startup_written=True, status=raft.statuses[mid(0)])
    return CleanShell(config, state, FakePeers(raft, config, workload(3), kube=kube), Metrics(),  # type: ignore[arg-type]
                      hold=hold)


async def test_an_absent_member_not_kept_is_removed_only_past_its_grace_under_the_fence(tmp_path: Path) -> None:
    raft, held = four_with_one_gone(), []
    shell = clean_shell(tmp_path, raft, held)
    await shell.round()
    assert raft.calls == [] and mid(3) in shell.absent_since, "the first round only starts the absence clock"
    shell.absent_since[mid(3)] = time.monotonic() - shell.settings.clean_grace - 1
    await shell.round()
    assert raft.calls == ["lock", "fence", f"remove {mid(3):x}", "unlock"]
    assert held == ["clean-locked"]
    assert [m.id for m in raft.members] == [mid(o) for o in range(3)] and shell.absent_since == {}


async def test_a_member_that_answers_again_is_not_removed(tmp_path: Path) -> None:
    raft = four_with_one_gone()
    shell = clean_shell(tmp_path, raft, [])
    await shell.round()
    raft.statuses[mid(3)] = status(3)
    shell.absent_since[mid(3)] = time.monotonic() - shell.settings.clean_grace - 1
    await shell.round()
    assert raft.calls == [] and shell.absent_since == {}


def test_the_leader_only_loops_are_one_flag_in_the_app_table(tmp_path: Path) -> None:
    app = Sidecar(settings(0, tmp_path), FakeKube())  # type: ignore[arg-type]
    assert {loop.name for loop in app.table() if loop.leader_only} == {"clean", "membership", "backup"}
    assert {loop.name for loop in app.table()} == {"heartbeat", "promote", "clean", "membership", "backup",
                                                  "maintenance", "repair"}


async def test_a_leader_only_round_while_not_leading_only_resets_its_shell(tmp_path: Path) -> None:
    app = Sidecar(settings(0, tmp_path), FakeKube())  # type: ignore[arg-type]
    ran: list[str] = []

    async def round_() -> None:
        ran.append("round")

    app.clean.absent_since = {mid(3): 1.0}
    clean = next(loop for loop in app.table() if loop.name == "clean")
    guarded = app.guarded(dataclasses.replace(clean, round=round_))
    app.state.phase, app.state.status = "started", status(0, leader=1)  # a follower
    await guarded()
    assert ran == [] and app.clean.absent_since == {}
    app.state.status = status(0)  # leads
    await guarded()
    assert ran == ["round"]


def three_with_one_on_a_lost_node(marked: bool) -> tuple[FakeRaft, FakeKube]:
    """demo-0 leads; demo-2 is kept but does not answer; its pod carries the operator's mark (or not)."""
    raft = FakeRaft([member(o) for o in range(3)], {mid(0): status(0), mid(1): status(1), mid(2): None})
    annotations = {contract.ANNOTATION_NODE_LOST: nodeloss.Mark("node3", "2026-11-29T10:00:00Z",
                                                                "2026-11-29T10:05:00Z").to_json()} if marked else {}
    return raft, FakeKube({"demo-2": {"metadata": {"name": "demo-2", "annotations": annotations}}})


async def test_a_kept_member_marked_lost_is_removed_once_silent_long_enough_and_the_removal_recorded_on_its_pod(
        tmp_path: Path) -> None:
    raft, kube = three_with_one_on_a_lost_node(marked=True)
    shell = clean_shell(tmp_path, raft, [], kube)
    await shell.round()
    assert raft.calls == [] and shell.lost == {mid(2): "demo-2"}, "the first round only starts the absence clock"
    shell.absent_since[mid(2)] = time.monotonic() - CONFIRM_S - 1
    await shell.round()
    assert raft.calls == ["lock", "fence", f"remove {mid(2):x}", "unlock"]
    removal = nodeloss.parse_removal(kube.pods["demo-2"]["metadata"]["annotations"][contract.ANNOTATION_NODE_LOST_REMOVAL])
    assert removal is not None and (removal.member, removal.by) == (f"{mid(2):x}", "demo-0")
    assert "lost" in removal.reason and kube.writes == ["annotate demo-2"]


async def test_a_kept_member_without_the_mark_is_never_removed_however_long_silent(tmp_path: Path) -> None:
    raft, kube = three_with_one_on_a_lost_node(marked=False)
    shell = clean_shell(tmp_path, raft, [], kube)
    await shell.round()
    shell.absent_since[mid(2)] = time.monotonic() - 10 * shell.settings.clean_grace
    await shell.round()
    assert raft.calls == [] and kube.writes == []


async def test_members_that_all_answer_cost_no_pod_read(tmp_path: Path) -> None:
    raft, kube = three_with_one_on_a_lost_node(marked=True)
    raft.statuses[mid(2)] = status(2)  # cut off from the apiserver, not from Raft
    shell = clean_shell(tmp_path, raft, [], kube)
    for _ in range(2):
        await shell.round()
    assert raft.calls == [] and kube.reads == [] and kube.writes == []


async def test_a_removal_the_api_refused_to_record_is_written_next_round(tmp_path: Path) -> None:
    raft, kube = three_with_one_on_a_lost_node(marked=True)
    shell = clean_shell(tmp_path, raft, [], kube)
    await shell.round()
    shell.absent_since[mid(2)] = time.monotonic() - CONFIRM_S - 1
    real_annotate = kube.annotate_pod

    async def refused(name: str, annotations: dict) -> None:
        raise ConnectionError("apiserver away")

    kube.annotate_pod = refused  # type: ignore[method-assign]
    await shell.round()
    assert f"remove {mid(2):x}" in raft.calls and list(shell.unrecorded) == ["demo-2"]
    kube.annotate_pod = real_annotate  # type: ignore[method-assign]
    await shell.round()
    assert shell.unrecorded == {} and contract.ANNOTATION_NODE_LOST_REMOVAL in kube.pods["demo-2"]["metadata"]["annotations"]


async def test_a_member_not_kept_whose_pod_the_api_no_longer_has_goes_after_the_confirmation(tmp_path: Path) -> None:
    raft, kube = four_with_one_gone(), FakeKube()  # no pod demo-3: the workload keeps 0..2
    shell = clean_shell(tmp_path, raft, [], kube)
    await shell.round()
    assert raft.calls == [] and shell.gone == {mid(3)} and kube.reads == ["pod demo-3"]
    shell.absent_since[mid(3)] = time.monotonic() - CONFIRM_S - 1
    await shell.round()
    assert raft.calls == ["lock", "fence", f"remove {mid(3):x}", "unlock"]


async def test_a_member_not_kept_whose_pod_is_still_terminating_waits_for_its_leave(tmp_path: Path) -> None:
    raft = four_with_one_gone()
    kube = FakeKube({"demo-3": {"metadata": {"name": "demo-3", "deletionTimestamp": "2026-11-29T10:00:00Z"}}})
    shell = clean_shell(tmp_path, raft, [], kube)
    await shell.round()
    shell.absent_since[mid(3)] = time.monotonic() - CONFIRM_S - 1
    await shell.round()
    assert raft.calls == [] and shell.gone == set()


async def test_a_pod_that_cannot_be_read_is_never_taken_for_gone(tmp_path: Path) -> None:
    """The API away while Raft is fine: no evidence, no removal before the grace."""
    raft, kube = four_with_one_gone(), FakeKube()

    async def away(name: str) -> None:
        raise ConnectionError("apiserver away")

    kube.pod = away  # type: ignore[method-assign]
    shell = clean_shell(tmp_path, raft, [], kube)
    shell.absent_since[mid(3)] = time.monotonic() - CONFIRM_S - 1
    with pytest.raises(ConnectionError):
        await shell.round()
    assert raft.calls == []
