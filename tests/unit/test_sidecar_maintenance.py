"""Space and alarms: NOSPACE is compaction, one defragmentation at a time with the leader last, then
disarm; CORRUPT is never repaired in place; a schedule or a threshold starts a defragmentation run."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import pytest

from raftset.sidecar.io.etcdclient import Alarm, AlarmKind, Status
from raftset.sidecar.pure.maintenance import (NOSPACE, SCHEDULE, THRESHOLD, Kind, Policy, Run, decide,
                                         idle, next_scheduled, schedule_error, started_scheduled_run)
from tests.unit.sidecar_data import member, mid, status

pytestmark = pytest.mark.unit

MIB = 1024**2
MEMBERS = [member(0), member(1), member(2)]  # member 0 leads (sidecar_data.status)
LEADER = mid(0)


def sized(ordinal: int, size: int, in_use: int) -> Status:
    return dataclasses.replace(status(ordinal), db_size=size, db_size_in_use=in_use)


def all_answer(size: int = 100 * MIB, in_use: int = 100 * MIB) -> dict[int, Status | None]:
    return {mid(o): sized(o, size, in_use) for o in range(3)}


def step(run: Run, *, alarms=(), statuses=None, policy=Policy(), due=False, quota=0, members=MEMBERS):
    return decide(leader_id=LEADER, members=members, statuses=all_answer() if statuses is None else statuses,
                  alarms=list(alarms), run=run, policy=policy, schedule_due=due, quota=quota)


def walk(run: Run, **kwargs) -> list:
    """Decide, pretend each action succeeded, decide again: the whole episode, action by action."""
    actions = []
    for _ in range(10):
        action = step(run, **kwargs)
        actions.append(action)
        run = action.run
        if action.kind in (Kind.DISARM, Kind.FINISHED, Kind.NONE):
            break
    return actions


NOSPACE_ON_1 = (Alarm(mid(1), AlarmKind.NOSPACE),)


def test_nospace_is_compaction_then_followers_then_the_leader_then_disarm() -> None:
    actions = walk(Run(), alarms=NOSPACE_ON_1)
    assert [a.kind for a in actions] == [Kind.COMPACT, Kind.DEFRAGMENT, Kind.DEFRAGMENT, Kind.DEFRAGMENT, Kind.DISARM]
    assert [a.member_id for a in actions if a.kind is Kind.DEFRAGMENT] == [mid(1), mid(2), LEADER]
    assert actions[-1].alarms == NOSPACE_ON_1
    assert actions[-1].run == Run()  # the episode is over
    assert all(a.reason for a in actions), "every action is narrated in an Event"
    assert "leader, last" in actions[3].message


def test_learners_are_defragmented_before_followers() -> None:
    members = [*MEMBERS, member(3, learner=True)]
    statuses = {**all_answer(), mid(3): sized(3, 100 * MIB, 100 * MIB)}
    actions = walk(Run(), alarms=NOSPACE_ON_1, members=members, statuses=statuses)
    assert [a.member_id for a in actions if a.kind is Kind.DEFRAGMENT] == [mid(3), mid(1), mid(2), LEADER]


def test_two_voters_cannot_spare_one_for_a_routine_defragmentation_but_nospace_goes_on() -> None:
    members = [member(0), member(1)]
    action = step(Run(cause=SCHEDULE), members=members)
    assert action.kind is Kind.NONE and "quorum" in action.message
    actions = walk(Run(), alarms=NOSPACE_ON_1, members=members)
    assert [a.kind for a in actions] == [Kind.COMPACT, Kind.DEFRAGMENT, Kind.DEFRAGMENT, Kind.DISARM]


def test_a_new_leader_starts_the_episode_over_and_repeats_nothing_unsafe() -> None:
    half_done = Run(cause=NOSPACE, compacted=True, done=frozenset({mid(1)}))
    assert step(half_done, alarms=NOSPACE_ON_1).member_id == mid(2)
    assert step(Run(), alarms=NOSPACE_ON_1).kind is Kind.COMPACT  # forgotten run: compaction is idempotent


def test_no_routine_defragmentation_that_would_cost_the_quorum() -> None:
    statuses = all_answer()
    statuses[mid(2)] = None  # one of three members is down: defragmenting another would stall writes
    action = step(Run(cause=SCHEDULE), statuses=statuses)
    assert action.kind is Kind.NONE and "quorum" in action.message


def test_under_nospace_a_quorum_that_answers_is_enough_and_the_silent_member_is_skipped() -> None:
    statuses = all_answer()
    statuses[mid(2)] = None  # writes are refused anyway: a moment without quorum costs nothing more
    actions = walk(Run(cause=NOSPACE, compacted=True), alarms=NOSPACE_ON_1, statuses=statuses)
    assert [(a.kind, a.member_id) for a in actions] == [(Kind.DEFRAGMENT, mid(1)), (Kind.DEFRAGMENT, LEADER),
                                                        (Kind.DISARM, None)]
    statuses[mid(1)] = None  # no quorum answers: nothing can be done
    assert step(Run(cause=NOSPACE, compacted=True), alarms=NOSPACE_ON_1, statuses=statuses).kind is Kind.NONE


def test_a_lone_member_is_defragmented_and_disarmed() -> None:
    actions = walk(Run(), alarms=(Alarm(LEADER, AlarmKind.NOSPACE),), members=[member(0)],
                   statuses={LEADER: sized(0, 100 * MIB, 10 * MIB)})
    assert [a.kind for a in actions] == [Kind.COMPACT, Kind.DEFRAGMENT, Kind.DISARM]


def test_data_that_fills_the_quorum_by_itself_is_reported_not_disarmed() -> None:
    quota = 100 * MIB
    statuses = {mid(o): sized(o, quota, 99 * MIB) for o in range(3)}
    run = Run(cause=NOSPACE, compacted=True, done=frozenset({mid(0), mid(1), mid(2)}))
    first = step(run, alarms=NOSPACE_ON_1, statuses=statuses, quota=quota)
    assert first.kind is Kind.REPORT and first.reason == "QuotaExhausted" and first.warning
    assert "delete keys" in first.message
    again = step(first.run, alarms=NOSPACE_ON_1, statuses=statuses, quota=quota)
    assert again.kind is Kind.NONE, "reported once, not on every round"
    room = {mid(o): sized(o, quota, 30 * MIB) for o in range(3)}
    assert step(run, alarms=NOSPACE_ON_1, statuses=room, quota=quota).kind is Kind.DISARM


def test_an_engine_without_defragment_gets_compaction_and_disarm() -> None:
    actions = walk(Run(), alarms=NOSPACE_ON_1, policy=Policy(can_defragment=False))
    assert [a.kind for a in actions] == [Kind.COMPACT, Kind.DISARM]
    assert step(Run(), policy=Policy(can_defragment=False), due=True).kind is Kind.NONE


def test_corrupt_is_never_repaired_in_place() -> None:
    # Judged and handed to member replacement by raftset.sidecar.pure.corruption, not here.
    alarms = (Alarm(mid(2), AlarmKind.CORRUPT),)
    assert step(Run(), alarms=alarms).kind is Kind.NONE


def test_a_corrupt_member_is_left_out_of_a_nospace_episode() -> None:
    alarms = (Alarm(mid(2), AlarmKind.CORRUPT), *NOSPACE_ON_1)
    actions = walk(Run(), alarms=alarms)
    assert mid(2) not in [a.member_id for a in actions if a.kind is Kind.DEFRAGMENT]
    assert actions[-1].kind is Kind.DISARM


def test_an_alarm_cleared_elsewhere_ends_the_episode() -> None:
    assert step(Run(cause=NOSPACE, compacted=True)).run.cause == ""


def test_a_due_schedule_defragments_every_member_leader_last() -> None:
    actions = walk(Run(), due=True, policy=Policy(schedule="0 3 * * *"))
    assert [a.member_id for a in actions if a.kind is Kind.DEFRAGMENT] == [mid(1), mid(2), LEADER]
    assert actions[0].run.cause == SCHEDULE
    assert actions[-1].kind is Kind.FINISHED and actions[-1].reason == "DefragmentationFinished"


def test_a_due_schedule_starts_its_run_once_and_the_next_is_counted_from_then() -> None:
    policy = Policy(schedule="0 3 * * *")
    first = step(Run(), due=True, policy=policy)
    assert started_scheduled_run(True, Run(), first.run)
    assert not started_scheduled_run(True, first.run, step(first.run, due=True, policy=policy).run)
    assert not started_scheduled_run(False, Run(), first.run)
    # NOSPACE first: the schedule waits for the episode, and starts its run after it.
    nospace = step(Run(), alarms=[Alarm(LEADER, AlarmKind.NOSPACE)], due=True, policy=policy)
    assert not started_scheduled_run(True, Run(), nospace.run)


def test_the_leader_reads_no_status_when_nothing_could_be_due() -> None:
    assert idle([], False, Run(), Policy(schedule="0 3 * * *"))
    assert not idle([Alarm(LEADER, AlarmKind.NOSPACE)], False, Run(), Policy())
    assert not idle([], True, Run(), Policy())
    assert not idle([], False, Run(cause=SCHEDULE), Policy())
    assert not idle([], False, Run(), Policy(threshold_percent=50))


def test_the_threshold_picks_only_fragmented_members() -> None:
    statuses = all_answer()
    statuses[mid(2)] = sized(2, 400 * MIB, 100 * MIB)  # 75% free, 300 MiB
    statuses[LEADER] = sized(0, 400 * MIB, 150 * MIB)
    armed = step(Run(), statuses=statuses, policy=Policy(threshold_percent=50))
    assert armed.kind is Kind.NONE and armed.run.cause == THRESHOLD and "next round" in armed.message
    actions = walk(armed.run, statuses=statuses, policy=Policy(threshold_percent=50))
    assert [a.member_id for a in actions if a.kind is Kind.DEFRAGMENT] == [mid(2), LEADER]
    assert actions[-1].kind is Kind.FINISHED


def test_a_follower_that_crosses_the_threshold_late_still_goes_before_the_leader() -> None:
    policy = Policy(threshold_percent=50)
    statuses = all_answer()
    statuses[LEADER] = sized(0, 400 * MIB, 100 * MIB)  # the leader compacted first
    armed = step(Run(), statuses=statuses, policy=policy).run
    statuses[mid(1)] = sized(1, 400 * MIB, 100 * MIB)  # the compaction reached a follower since
    first = step(armed, statuses=statuses, policy=policy)
    assert (first.kind, first.member_id) == (Kind.DEFRAGMENT, mid(1))
    assert step(first.run, statuses=statuses, policy=policy).member_id == LEADER


def test_the_threshold_ignores_small_files_and_can_be_off() -> None:
    statuses = all_answer()
    statuses[mid(1)] = sized(1, 10 * MIB, 1 * MIB)  # 90% free, but only 9 MiB
    assert step(Run(), statuses=statuses, policy=Policy(threshold_percent=50)).kind is Kind.NONE
    assert step(Run(), statuses=statuses, policy=Policy(threshold_percent=50, min_bytes=MIB)).run.cause == THRESHOLD
    assert step(Run(), statuses=statuses, policy=Policy(threshold_percent=0, min_bytes=0)).kind is Kind.NONE


def test_nospace_wins_over_a_schedule_in_progress() -> None:
    run = Run(cause=SCHEDULE, done=frozenset({mid(1)}))
    assert step(run, alarms=NOSPACE_ON_1).kind is Kind.COMPACT


def test_cron_schedules() -> None:
    assert schedule_error("0 3 * * *") is None and schedule_error("") is None
    assert "cron" in (schedule_error("every day") or "")
    after = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    assert next_scheduled("0 3 * * *", after) == datetime(2026, 1, 2, 3, 0, tzinfo=timezone.utc)
    assert next_scheduled("", after) is None
