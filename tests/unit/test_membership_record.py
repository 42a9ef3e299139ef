"""The Raft membership record: what the leader's sidecar publishes, when, and how the operator reads it."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from raftset import contract
from raftset.membership import RaftMembership, parse_membership
from raftset.operator.pure.scale_step import ScaleStep, parse_step
from raftset.sidecar.pure.membership import lease_body, record, should_publish
from tests.unit.sidecar_data import NAMING, member, mid, status

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
MEMBERS = [member(2), member(0), member(1, learner=True), member(3, started=False)]
ORDINALS = {m.id: NAMING.ordinal_of_member(m.name, m.peer_urls) for m in MEMBERS}


def published() -> RaftMembership:
    statuses = {mid(o): status(o, applied=90 + o) for o in (0, 2)}
    return record(status(0, applied=120), "demo-0", MEMBERS, statuses, ORDINALS, NOW)


def test_the_record_names_every_member_with_what_raft_and_its_status_say() -> None:
    rec = published()
    assert (rec.leader_id, rec.leader, rec.term, rec.index) == (f"{mid(0):x}", "demo-0", 3, 120)
    assert [(m.ordinal, m.name, m.learner, m.started, m.voter, m.raft_index) for m in rec.members] == [
        (0, "demo-0", False, True, True, 90),
        (1, "demo-1", True, True, False, None),  # did not answer: index unknown
        (2, "demo-2", False, True, True, 92),
        (3, "", False, False, False, None),  # never started: known by its peer URL
    ]
    assert rec.by_ordinal(3) is rec.members[3] and rec.by_id(f"{mid(2):x}") is rec.members[2]
    assert rec.by_ordinal(7) is None and rec.by_id("ff") is None


def test_the_record_survives_the_lease_annotation_round_trip() -> None:
    rec = published()
    body = lease_body("demo", "ns", rec, duration=30, owner={"kind": "StatefulSet", "uid": "u"})
    assert body["metadata"]["name"] == contract.membership_lease_name("demo") == "demo-membership"
    assert body["metadata"]["labels"][contract.LABEL_MEMBERSHIP] == "true"
    assert body["spec"]["holderIdentity"] == "demo-0"
    assert body["metadata"]["ownerReferences"] == [{"kind": "StatefulSet", "uid": "u"}]
    assert parse_membership(body["metadata"]["annotations"][contract.ANNOTATION_MEMBERSHIP]) == rec


@pytest.mark.parametrize("raw", [None, "", "not json", "[]", '{"members": []}',
                                 json.dumps({"leader_id": "1", "leader": "demo-0", "term": "x", "index": 1,
                                             "members": []}),
                                 json.dumps({"leader_id": "1", "leader": "demo-0", "term": 1, "index": 1,
                                             "members": [{"id": "1"}]})])
def test_an_unreadable_record_is_no_record(raw: str | None) -> None:
    assert parse_membership(raw) is None


def test_publish_on_change_of_membership_leader_or_term_and_on_the_slow_refresh() -> None:
    rec = published()
    assert should_publish(None, rec, None, 0.0, 10)
    assert not should_publish(rec, replace(rec, index=999, published="later"), 0.0, 5.0, 10)  # indexes move always
    assert should_publish(rec, rec, 0.0, 10.0, 10)  # refresh
    assert should_publish(rec, replace(rec, term=4), 0.0, 1.0, 10)
    assert should_publish(rec, replace(rec, leader_id="other"), 0.0, 1.0, 10)
    for changed in (replace(rec.members[1], learner=False), replace(rec.members[3], started=True, name="demo-3")):
        members = tuple(changed if m.id == changed.id else m for m in rec.members)
        assert should_publish(rec, replace(rec, members=members), 0.0, 1.0, 10)
    assert should_publish(rec, replace(rec, members=rec.members[:-1]), 0.0, 1.0, 10)


def test_a_scale_step_round_trips_and_unreadable_steps_are_none() -> None:
    step = ScaleStep("scale-in", "demo-4", "1004", 120, "2026-01-01T12:00:00Z")
    assert parse_step(step.to_json()) == step
    for raw in (None, "", "{", json.dumps({"action": "explode", "pod": "p", "member_id": "", "after_index": 1,
                                           "started": "t"}), json.dumps({"action": "scale-in"})):
        assert parse_step(raw) is None
