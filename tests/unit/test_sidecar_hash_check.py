"""The leader's periodic hash check (no alarm) hands a member over to replacement by the same rules as a
CORRUPT alarm: a strict majority of three voters or more agrees and the member alone differs. Hashes that
cannot be compared are no finding; every other difference is a suspicion a person decides on."""

from __future__ import annotations

import pytest

from raftset.sidecar.io.etcdclient import Alarm, AlarmKind, KVHash
from raftset.sidecar.pure.corruption import (CHECK_AGREE, CHECK_DIFFERS, CHECK_NOT_COMPARED, CHECK_UNCONFIRMED, Check,
                                        CorruptionRecord, check, check_due, check_outcome, common_revision, judge, outdated, parse_record,
                                        record, report_key, suspicion)
from tests.unit.sidecar_data import member, mid

pytestmark = pytest.mark.unit

REV = 42
GOOD, BAD, OTHER = 0xAAAA, 0xBBBB, 0xCCCC


def hashes(*values: int | None, revision: int = REV, compacted: int = -1) -> dict[int, KVHash | None]:
    return {mid(o): None if v is None else KVHash(mid(o), revision, v, compacted) for o, v in enumerate(values)}


def members(n: int = 3) -> list:
    return [member(o) for o in range(n)]


def verdicts(c: Check) -> list[tuple[int, bool]]:
    return [(v.member_id, v.replace) for v in c.verdicts]


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_agreeing_voters_are_compared_and_nobody_is_judged(n: int) -> None:
    c = check(members(n), hashes(*[GOOD] * n), REV)
    assert (c.verdicts, c.compared) == ((), True) and "agrees" in c.reason


@pytest.mark.parametrize("bad", [0, 1, 2])
def test_one_voter_contradicted_by_the_majority_is_replaced_leader_or_not(bad: int) -> None:
    values = [BAD if o == bad else GOOD for o in range(3)]
    c = check(members(), hashes(*values), REV)
    assert verdicts(c) == [(mid(bad), True)] and c.compared
    v = c.verdicts[0]
    assert not v.alarm, "no alarm named it: its record stands without one"
    assert v.reason.startswith(f"the hash check (no alarm) finds that the data of member demo-{bad} ")
    for word in ("disagrees with the majority", f"revision {REV}", f"{BAD:08x}", f"2 of 3 voters agree on {GOOD:08x}"):
        assert word in v.reason, v.reason


def test_five_voters_one_contradicted() -> None:
    c = check(members(5), hashes(GOOD, GOOD, OTHER, GOOD, GOOD), REV)
    assert verdicts(c) == [(mid(2), True)] and "4 of 5 voters" in c.verdicts[0].reason


def test_two_dissenters_beside_a_majority_are_both_doubtful() -> None:
    for values in ((GOOD, GOOD, GOOD, BAD, BAD), (GOOD, GOOD, GOOD, BAD, OTHER)):
        c = check(members(5), hashes(*values), REV)
        assert verdicts(c) == [(mid(3), False), (mid(4), False)], values
        assert all("more than one member is suspect" in v.reason and "CORRUPT" not in v.reason for v in c.verdicts)


@pytest.mark.parametrize("values", [(GOOD, GOOD, BAD, BAD), (GOOD, BAD, OTHER)])
def test_without_a_strict_majority_every_voter_is_doubtful(values) -> None:
    c = check(members(len(values)), hashes(*values), REV)
    assert verdicts(c) == [(mid(o), False) for o in range(len(values))]
    assert all("no strict majority" in v.reason for v in c.verdicts)


def test_two_voters_that_differ_are_both_doubtful() -> None:
    c = check(members(2), hashes(GOOD, BAD), REV)
    assert verdicts(c) == [(mid(0), False), (mid(1), False)]
    assert all("three voters or more" in v.reason and v.reason.startswith("the hash check finds the data of member")
               for v in c.verdicts)


@pytest.mark.parametrize(("given", "word"), [
    (hashes(GOOD, None, BAD), "could not be read"),
    ({mid(0): KVHash(mid(0), REV, GOOD, -1), mid(1): KVHash(mid(1), REV, BAD, -1)}, "could not be read"),
    ({**hashes(GOOD, GOOD), mid(2): KVHash(mid(2), REV + 1, BAD, -1)}, "different revisions"),
    ({**hashes(GOOD, GOOD), mid(2): KVHash(mid(2), REV, BAD, 7)}, "compacted at different revisions"),
])
def test_hashes_that_cannot_be_compared_are_no_finding(given, word) -> None:
    c = check(members(), given, REV)
    assert (c.verdicts, c.compared) == ((), False) and word in c.reason


@pytest.mark.parametrize("pending", [member(3, learner=True), member(3, started=False)])
def test_a_membership_change_under_way_is_no_finding(pending) -> None:
    c = check([*members(), pending], hashes(GOOD, GOOD, BAD), REV)
    assert (c.verdicts, c.compared) == ((), False) and "still joining" in c.reason


def test_no_members_is_no_finding() -> None:
    assert check([], {}, REV) == Check(reason="no voter")


@pytest.mark.parametrize(("n", "given", "outcome"), [
    (3, hashes(GOOD, GOOD, GOOD), CHECK_AGREE),
    (3, hashes(GOOD, GOOD, BAD), CHECK_DIFFERS),
    (5, hashes(GOOD, GOOD, GOOD, BAD, OTHER), CHECK_UNCONFIRMED),  # two suspects: a person decides
    (3, hashes(GOOD, BAD, OTHER), CHECK_UNCONFIRMED),  # no majority
    (2, hashes(GOOD, BAD), CHECK_UNCONFIRMED),  # too few voters
    (3, hashes(GOOD, None, BAD), CHECK_NOT_COMPARED),  # a member restarting: no finding, not a doubt
])
def test_each_check_is_counted_by_what_it_found(n: int, given, outcome: str) -> None:
    assert check_outcome(check(members(n), given, REV)) == outcome


def test_the_same_rules_as_a_corrupt_alarms_verdict() -> None:
    # What the check replaces, a CORRUPT alarm naming the same member replaces too, with the same numbers.
    given = hashes(GOOD, GOOD, BAD)
    alarmed = judge([Alarm(mid(2), AlarmKind.CORRUPT)], members(), given, REV).verdicts
    found = check(members(), given, REV).verdicts
    assert [(v.member_id, v.replace, v.alarm) for v in alarmed] == [(mid(2), True, True)]
    assert [(v.member_id, v.replace, v.alarm) for v in found] == [(mid(2), True, False)]
    assert alarmed[0].reason.split(": ", 1)[1] == found[0].reason.split(": ", 1)[1]


@pytest.mark.parametrize(("interval", "alarms", "since", "due"), [
    (300, [], None, True),  # a new leader checks at once
    (300, [], 299.0, False),
    (300, [], 300.0, True),
    (0, [], None, False),  # off
    (300, [Alarm(mid(1), AlarmKind.CORRUPT)], None, False),  # judge compares the hashes then
    (300, [Alarm(mid(1), AlarmKind.NOSPACE)], 301.0, True),
])
def test_when_the_check_is_due(interval, alarms, since, due) -> None:
    assert check_due(interval, alarms, since) is due


@pytest.mark.parametrize(("own", "common"), [
    ({mid(0): 120, mid(1): 118, mid(2): 120}, 118),  # a follower a moment behind: every voter has 118
    # An Xline member whose counter fell behind for good (docs/engines.md): compared where it stands,
    # not where the leader stands, so its hash is read and differs instead of "future revision" forever.
    ({mid(0): 8195, mid(1): 8195, mid(2): 8192}, 8192),
    ({mid(0): 120, mid(1): None, mid(2): 120}, None),  # one unread: nothing every voter has is known
    ({}, None),
])
def test_the_hashes_are_compared_at_the_highest_revision_every_voter_has(own, common) -> None:
    assert common_revision(own) == common


def test_a_hash_check_record_round_trips_and_an_older_record_is_an_alarms() -> None:
    found = record(check(members(), hashes(GOOD, GOOD, BAD), REV).verdicts[0])
    assert (found.member, found.replace, found.alarm) == (f"{mid(2):x}", True, False)
    assert parse_record(found.to_json()) == found
    legacy = parse_record('{"member": "1", "replace": true, "reason": "r"}')
    assert legacy == CorruptionRecord("1", True, "r", alarm=True)


def test_a_hash_check_verdict_is_a_diagnosis_without_any_alarm() -> None:
    found = CorruptionRecord(f"{mid(2):x}", True, "differs", alarm=False)
    assert suspicion(found, mid(2), ()) == found
    assert suspicion(found, mid(2), ("NOSPACE",)) == found
    assert suspicion(found, 0x2001, ()) is None, "about the member this pod ran before"
    assert suspicion(found, None, ()) is None


def test_a_later_check_that_compared_everything_clears_a_verdict_it_no_longer_makes() -> None:
    ours = CorruptionRecord(f"{mid(1):x}", False, "differed", alarm=False)
    agreeing = check(members(), hashes(GOOD, GOOD, GOOD), REV)
    assert outdated(ours, mid(1), agreeing)
    assert not outdated(ours, mid(1), check(members(), hashes(GOOD, BAD, OTHER), REV)), "still suspect"
    assert not outdated(ours, mid(1), check(members(), hashes(GOOD, GOOD, None), REV)), "nothing compared"
    assert not outdated(ours, mid(2), agreeing), "about another member"
    assert not outdated(CorruptionRecord(f"{mid(1):x}", False, "alarm", alarm=True), mid(1), agreeing), "the alarm's own"
    assert not outdated(None, mid(1), agreeing)
    # The verdict on another member does not keep this one.
    assert outdated(ours, mid(1), check(members(), hashes(GOOD, GOOD, BAD), REV))


def test_a_hash_check_verdict_is_narrated_once_per_outcome_an_alarms_once_per_reason() -> None:
    # Writes flow without an alarm: every check names a new revision, which must not make a new Event.
    first = check(members(), hashes(GOOD, GOOD, BAD), REV).verdicts[0]
    later = check(members(), hashes(OTHER, OTHER, BAD, revision=REV + 9), REV + 9).verdicts[0]
    assert first.reason != later.reason and report_key(first) == report_key(later)
    doubt = check(members(4), hashes(GOOD, GOOD, BAD, BAD), REV).verdicts[2]
    assert doubt.member_id == first.member_id and not doubt.replace
    assert report_key(doubt) != report_key(first), "a doubt turning certain is news"
    alarmed = judge([Alarm(mid(2), AlarmKind.CORRUPT)], members(), hashes(GOOD, GOOD, BAD), REV).verdicts[0]
    assert report_key(alarmed) == (mid(2), alarmed.reason)
