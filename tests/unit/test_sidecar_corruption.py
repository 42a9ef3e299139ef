"""A CORRUPT alarm hands a member over to replacement only when a strict majority of voters contradicts
it at one revision; every doubtful case replaces nothing and names why; a departed member's alarm is
disarmed."""

from __future__ import annotations

import pytest

from raftset.sidecar.io.etcdclient import Alarm, AlarmKind, KVHash
from raftset.sidecar.pure.corruption import (Judgement, CorruptionRecord, accused, alarm_serializes, judge, lock_blocked,
                                        parse_record, record, suspicion)
from tests.unit.sidecar_data import member, mid

pytestmark = pytest.mark.unit

REV = 42
GOOD, BAD, OTHER = 0xAAAA, 0xBBBB, 0xCCCC


def corrupt(*ordinals: int) -> list[Alarm]:
    return [Alarm(mid(o), AlarmKind.CORRUPT) for o in ordinals]


def hashes(*values: int | None, revision: int = REV, compacted: int = -1) -> dict[int, KVHash | None]:
    return {mid(o): None if v is None else KVHash(mid(o), revision, v, compacted) for o, v in enumerate(values)}


def members(n: int = 3) -> list:
    return [member(o) for o in range(n)]


def one_doubt(j: Judgement, ordinal: int, *words: str) -> str:
    assert [(v.member_id, v.replace) for v in j.verdicts] == [(mid(ordinal), False)], j
    reason = j.verdicts[0].reason
    assert reason.startswith(f"the CORRUPT alarm names member demo-{ordinal} ({mid(ordinal):x})"), reason
    for word in words:
        assert word in reason, reason
    return reason


def test_no_corrupt_alarm_no_verdict() -> None:
    assert judge([], members(), hashes(GOOD, GOOD, BAD), REV) == Judgement()
    assert judge([Alarm(mid(2), AlarmKind.NOSPACE)], members(), hashes(GOOD, GOOD, BAD), REV) == Judgement()


def test_a_follower_contradicted_by_the_majority_is_replaced() -> None:
    j = judge(corrupt(2), members(), hashes(GOOD, GOOD, BAD), REV)
    assert [(v.member_id, v.replace) for v in j.verdicts] == [(mid(2), True)] and j.disarm == ()
    reason = j.verdicts[0].reason
    assert "demo-2" in reason and f"{BAD:08x}" in reason and f"2 of 3 voters agree on {GOOD:08x}" in reason
    assert f"revision {REV}" in reason


def test_the_leader_is_judged_like_any_member() -> None:
    # Member 0 leads (sidecar_data): the replacement moves leadership first (raftset.sidecar.pure.replace).
    j = judge(corrupt(0), members(), hashes(BAD, GOOD, GOOD), REV)
    assert [(v.member_id, v.replace) for v in j.verdicts] == [(mid(0), True)]


def test_five_voters_one_contradicted() -> None:
    j = judge(corrupt(3), members(5), hashes(GOOD, GOOD, GOOD, BAD, GOOD), REV)
    assert [(v.member_id, v.replace) for v in j.verdicts] == [(mid(3), True)]
    assert "4 of 5 voters" in j.verdicts[0].reason


def test_an_alarm_on_a_member_whose_data_agrees_is_doubtful() -> None:
    one_doubt(judge(corrupt(1), members(), hashes(GOOD, GOOD, GOOD), REV), 1, "raised in error")


def test_an_alarm_that_names_one_member_while_another_disagrees_is_doubtful() -> None:
    # etcd's periodic check runs on the leader: a corrupt leader accuses a healthy follower.
    one_doubt(judge(corrupt(1), members(), hashes(BAD, GOOD, GOOD), REV), 1, "more than one member is suspect",
              "demo-0")


def test_two_alarms_are_two_doubts() -> None:
    j = judge(corrupt(1, 2), members(5), hashes(GOOD, BAD, OTHER, GOOD, GOOD), REV)
    assert [(v.member_id, v.replace) for v in j.verdicts] == [(mid(1), False), (mid(2), False)]
    assert all("more than one member is suspect" in v.reason for v in j.verdicts)


def test_two_dissenters_are_doubtful_even_with_one_alarm() -> None:
    one_doubt(judge(corrupt(3), members(5), hashes(GOOD, GOOD, GOOD, BAD, OTHER), REV), 3, "more than one")


@pytest.mark.parametrize("values", [(GOOD, BAD, OTHER), (GOOD, GOOD, BAD, BAD), (GOOD, GOOD, BAD, BAD, OTHER)])
def test_no_strict_majority_is_doubtful(values) -> None:
    n = len(values)
    one_doubt(judge(corrupt(n - 1), members(n), hashes(*values), REV), n - 1, "no strict majority", f"{n} voters")


def test_an_unreadable_hash_is_doubtful() -> None:
    one_doubt(judge(corrupt(2), members(), hashes(GOOD, None, BAD), REV), 2, "demo-1", "could not be read")


def test_a_voter_missing_from_the_answers_is_unreadable() -> None:
    answers = hashes(GOOD, GOOD, BAD)
    del answers[mid(1)]
    one_doubt(judge(corrupt(2), members(), answers, REV), 2, "could not be read")


def test_hashes_at_different_revisions_are_doubtful() -> None:
    answers = {**hashes(GOOD, GOOD), mid(2): KVHash(mid(2), REV + 1, BAD, -1)}
    one_doubt(judge(corrupt(2), members(), answers, REV), 2, "different revisions")


def test_members_compacted_at_different_revisions_are_doubtful() -> None:
    answers = {**hashes(GOOD, GOOD, None, compacted=10), mid(2): KVHash(mid(2), REV, BAD, 12)}
    one_doubt(judge(corrupt(2), members(), answers, REV), 2, "compacted at different revisions")


@pytest.mark.parametrize("pending", [member(3, learner=True), member(3, started=False)])
def test_a_membership_change_under_way_is_doubtful(pending) -> None:
    one_doubt(judge(corrupt(2), [*members(), pending], hashes(GOOD, GOOD, BAD), REV), 2, "still joining")


@pytest.mark.parametrize("n", [1, 2])
def test_fewer_than_three_voters_is_doubtful(n) -> None:
    one_doubt(judge(corrupt(n - 1), members(n), hashes(*[GOOD] * (n - 1), BAD), REV), n - 1, "three voters")


def test_the_alarm_of_a_member_that_left_raft_is_disarmed() -> None:
    gone = Alarm(0x9999, AlarmKind.CORRUPT)
    assert judge([gone], members(), {}, 0) == Judgement(disarm=(gone,))
    assert accused([gone], members()) == []


def test_a_departed_members_alarm_is_disarmed_beside_a_verdict() -> None:
    gone = Alarm(0x9999, AlarmKind.CORRUPT)
    j = judge([gone, *corrupt(2)], members(), hashes(GOOD, GOOD, BAD), REV)
    assert j.disarm == (gone,) and [(v.member_id, v.replace) for v in j.verdicts] == [(mid(2), True)]


def test_accused_are_the_current_members_a_corrupt_alarm_names() -> None:
    alarms = [*corrupt(2, 1), Alarm(mid(0), AlarmKind.NOSPACE), Alarm(0x9999, AlarmKind.CORRUPT)]
    assert accused(alarms, members()) == [mid(1), mid(2)]


def test_the_alarm_stands_in_for_the_lock_only_when_it_names_this_member_alone() -> None:
    assert alarm_serializes(corrupt(2), mid(2))
    assert alarm_serializes([*corrupt(2), *corrupt(2), Alarm(mid(1), AlarmKind.NOSPACE)], mid(2))
    assert not alarm_serializes(corrupt(1), mid(2))
    assert not alarm_serializes(corrupt(1, 2), mid(2))
    assert not alarm_serializes([], mid(2))


def test_removal_under_a_corrupt_alarm_waits_unless_the_alarm_serializes_it() -> None:
    assert lock_blocked([], mid(2), lock_held=True) is None, "no CORRUPT alarm: the lock itself decides"
    assert lock_blocked([Alarm(mid(1), AlarmKind.NOSPACE)], mid(2), lock_held=False) is None
    assert lock_blocked(corrupt(2), mid(2), lock_held=False) is None
    held = lock_blocked(corrupt(2), mid(2), lock_held=True)
    assert held is not None and "taken before the CORRUPT alarm" in held
    other = lock_blocked(corrupt(1), mid(2), lock_held=False)
    assert other is not None and f"{mid(1):x}" in other and "disarm" in other
    both = lock_blocked(corrupt(1, 2), mid(2), lock_held=False)
    assert both is not None and f"{mid(1):x}, {mid(2):x}" in both


def test_the_record_round_trips_and_junk_is_no_record() -> None:
    j = judge(corrupt(2), members(), hashes(GOOD, GOOD, BAD), REV)
    found = record(j.verdicts[0])
    assert found.member == f"{mid(2):x}" and found.replace
    assert parse_record(found.to_json()) == found
    for junk in (None, "", "{", "[]", '{"member": "1"}', '{"member": "1", "replace": "yes", "reason": ""}'):
        parsed = parse_record(junk)
        assert parsed is None or not parsed.replace, junk


def test_a_verdict_is_a_diagnosis_of_the_member_it_names_while_its_alarm_stands() -> None:
    found = CorruptionRecord(f"{mid(2):x}", True, "contradicted")
    assert suspicion(found, mid(2), ("CORRUPT",)) == found
    assert suspicion(found, mid(2), ("NOSPACE", "CORRUPT")) == found
    assert suspicion(found, mid(2), ()) is None, "disarmed by a person: no diagnosis any more"
    assert suspicion(found, 0x2001, ("CORRUPT",)) is None, "about the member this pod ran before"
    assert suspicion(found, None, ("CORRUPT",)) is None
    assert suspicion(None, mid(2), ("CORRUPT",)) is None
