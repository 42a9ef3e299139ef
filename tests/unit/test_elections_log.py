"""Reading elections from etcd's raft log lines (tests/harness/elections.py): a hand-off is
told from an election by timeout."""

from __future__ import annotations

import pytest

from tests.harness.elections import Election, between, elections

pytestmark = pytest.mark.unit

# As etcd 3.5-3.7 write them (zap JSON, the raft logger's message in "msg").
HAND_OFF = [
    '{"level":"info","logger":"raft","msg":"b2 [term 4] received MsgTimeoutNow from a1 and starts an election to get leadership."}',
    '{"level":"info","logger":"raft","msg":"b2 is starting a new election at term 4"}',
    '{"level":"info","logger":"raft","msg":"b2 became leader at term 5"}',
]
TIMEOUT = [
    '{"level":"info","logger":"raft","msg":"c3 is starting a new election at term 5"}',
    '{"level":"info","logger":"raft","msg":"c3 became pre-candidate at term 5"}',
    '{"level":"info","logger":"raft","msg":"c3 became leader at term 6"}',
]


def test_a_hand_off_and_an_election_by_timeout_are_told_apart() -> None:
    found = elections([*HAND_OFF, *TIMEOUT])
    assert found == [Election(5, "b2", "a1"), Election(6, "c3", None)]
    assert [str(e) for e in found] == ["term 5: b2 (hand-off from a1)", "term 6: c3 (election by timeout)"]


def test_an_election_after_a_leader_lost_its_quorum_says_so() -> None:
    lines = ['{"msg":"a1 became leader at term 3"}',
             '{"msg":"a1 stepped down to follower since quorum is not active"}',
             '{"msg":"a1 became follower at term 3"}', '{"msg":"a1 became leader at term 4"}']
    assert elections(lines)[1] == Election(4, "a1", None, quorum_lost_by="a1")
    assert str(elections(lines)[1]) == "term 4: a1 (election by timeout after a1 lost its quorum)"


def test_a_transfer_that_another_member_won_is_no_hand_off() -> None:
    lines = [HAND_OFF[0], '{"msg":"c3 became leader at term 5"}']
    assert elections(lines) == [Election(5, "c3", None)]


def test_a_roll_is_the_terms_after_its_start_up_to_its_end() -> None:
    found = [Election(t, "b2", None) for t in (2, 3, 4, 5)]
    assert [e.term for e in between(found, 3, 5)] == [4, 5]
