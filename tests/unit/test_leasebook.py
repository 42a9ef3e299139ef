"""Issue 28: the clusters' Leases as the operator's own watch files them, and which cluster each change rings."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from raftset import contract
from raftset.operator.pure.heartbeats import LEASE, SIGHTING, from_observed
from raftset.operator.pure.leasebook import Change, LeaseBook
from tests.unit.builders import NOW, heartbeat, lease

pytestmark = pytest.mark.unit

S = timedelta(seconds=1)
KEY = ("default", "demo")


def beat(pod: str = "demo-0", *, version: str = "1", **fields: Any) -> dict[str, Any]:
    """A heartbeat Lease of cluster demo as the watch delivers it."""
    obj = lease(pod, heartbeat(pod=pod, **fields))
    obj["metadata"]["labels"][contract.LABEL_INSTANCE] = "demo"
    obj["metadata"]["resourceVersion"] = version
    return obj


def record(kind: str, annotations: dict[str, str], name: str = "demo-x", cluster: str = "demo") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "resourceVersion": "9", "annotations": annotations,
                         "labels": {kind: "true", contract.LABEL_INSTANCE: cluster}}, "spec": {}}


def test_a_new_heartbeat_rings_and_its_plain_renewals_only_push_its_expiry() -> None:
    book = LeaseBook()
    name = beat()["metadata"]["name"]
    assert book.seen(beat(), NOW) == Change(KEY, name, ring=True, expires=NOW + 30 * S)
    confirmed = book.seen(beat(version="1.5"), NOW + 2 * S)  # the first renewal seen: the planner waits for it
    assert confirmed is not None and confirmed.ring
    renewal = book.seen(beat(version="2"), NOW + 5 * S)
    assert renewal is not None and not renewal.ring and renewal.expires == NOW + 35 * S
    again = book.seen(beat(version="2"), NOW + 6 * S)  # a relist: the same version is no renewal
    assert again is not None and again.expires == NOW + 35 * S
    changed = book.seen(beat(version="3", role=contract.ROLE_LEADER), NOW + 7 * S)
    assert changed is not None and changed.ring


def test_the_rounds_read_the_heartbeats_with_the_operators_sighting() -> None:
    book = LeaseBook()
    book.seen(beat("demo-0"), NOW)
    book.seen(beat("demo-1"), NOW)
    book.seen(beat("demo-1", version="2"), NOW + 3 * S)
    heartbeats, memberships, backups = book.views()
    entries = heartbeats.get(KEY, [])
    assert len(entries) == 2 and all(set(e) == {LEASE, SIGHTING} for e in entries)
    records = from_observed(entries, "demo")
    assert [(m.pod, m.confirmed, m.observed) for m in records] == [("demo-0", False, NOW), ("demo-1", True, NOW + 3 * S)]
    assert heartbeats.get(("default", "other"), []) == [] and memberships.get(KEY, []) == [] and dict(backups) == {}


def membership(*, leader: str = "demo-0", term: int = 2, index: int = 7, published: str = "2026-11-28T00:00:00Z",
               learner: bool = False) -> str:
    """A membership record as the leader's sidecar publishes it (raftset.sidecar.pure.membership)."""
    members = [{"id": "a1", "name": "demo-0", "ordinal": 0, "peer_urls": ["http://demo-0:2380"], "learner": False,
                "started": True, "raft_index": index, "applied_index": index},
               {"id": "b2", "name": "demo-1", "ordinal": 1, "peer_urls": ["http://demo-1:2380"], "learner": learner,
                "started": True, "raft_index": index - 1, "applied_index": index - 1}]
    return json.dumps({"leader_id": "a1", "leader": leader, "term": term, "index": index, "members": members,
                       "published": published})


def test_a_membership_refresh_that_changes_no_member_nor_leader_rings_nothing() -> None:
    """The leader's sidecar republishes the record every heartbeat interval with new indexes and time:
    at thousands of clusters a round per refresh was the operator's whole cost at rest."""
    book = LeaseBook()
    first = book.seen(record(contract.LABEL_MEMBERSHIP, {contract.ANNOTATION_MEMBERSHIP: membership()}), NOW)
    assert first is not None and first.ring
    refresh = membership(index=9, published="2026-11-28T00:00:10Z")
    again = book.seen(record(contract.LABEL_MEMBERSHIP, {contract.ANNOTATION_MEMBERSHIP: refresh}), NOW + 10 * S)
    assert again == Change(KEY, "demo-x", ring=False)
    assert book.views()[1].get(KEY) == [refresh]  # the rounds read the newest record all the same
    for changed in (membership(learner=True), membership(term=3), membership(leader="demo-1"), "not json"):
        heard = book.seen(record(contract.LABEL_MEMBERSHIP, {contract.ANNOTATION_MEMBERSHIP: changed}), NOW)
        assert heard is not None and heard.ring, changed


def test_membership_and_backup_records_ring_on_every_change_and_read_as_kopfs_indices_did() -> None:
    book = LeaseBook()
    raw = json.dumps({"index": 7})
    assert book.seen(record(contract.LABEL_MEMBERSHIP, {contract.ANNOTATION_MEMBERSHIP: raw}), NOW) == \
        Change(KEY, "demo-x", ring=True)
    assert book.seen(record(contract.LABEL_BACKUP, {"a": "1"}, name="demo-backup"), NOW) == \
        Change(KEY, "demo-backup", ring=True)
    _, memberships, backups = book.views()
    assert memberships.get(KEY) == [raw] and backups.get(KEY) == [{"a": "1"}]
    book.seen(record(contract.LABEL_MEMBERSHIP, {}), NOW)  # the record removed from the Lease
    assert book.views()[1].get(KEY, []) == []


def test_a_deleted_lease_rings_and_leaves_the_book() -> None:
    book = LeaseBook()
    book.seen(beat(), NOW)
    name = beat()["metadata"]["name"]
    assert book.deleted("default", name) == Change(KEY, name, ring=True, gone=True)
    assert book.views()[0].get(KEY, []) == [] and book.heard[KEY] == {}
    assert book.deleted("default", name) is None, "each deletion once"
    assert book.deleted("default", "unknown") is None


def test_a_relist_after_a_gap_drops_what_is_gone_in_its_namespace_only() -> None:
    book = LeaseBook()
    kept, gone = beat("demo-0"), beat("demo-1")
    elsewhere = beat("demo-2")
    elsewhere["metadata"]["namespace"] = "other"
    for obj in (kept, gone, elsewhere):
        book.seen(obj, NOW)
    book.seen(beat("demo-0", version="2"), NOW + 2 * S)
    changes = book.listed([beat("demo-0", version="3")], "default", NOW + 5 * S)
    assert [(c.name, c.gone, c.ring) for c in changes] == [
        (kept["metadata"]["name"], False, False), (gone["metadata"]["name"], True, True)]
    assert [m.pod for m in from_observed(book.views()[0].get(KEY, []), "demo")] == ["demo-0"]
    assert book.views()[0].get(("other", "demo")), "another namespace's list decides for it"
    everywhere = book.listed([], None, NOW + 6 * S)  # an operator of every namespace: all gone
    assert sorted((c.key, c.gone) for c in everywhere) == [(KEY, True), (("other", "demo"), True)]


def test_leases_of_no_cluster_or_kind_are_ignored_and_one_that_loses_its_labels_is_dropped() -> None:
    book = LeaseBook()
    stray = beat()
    del stray["metadata"]["labels"][contract.LABEL_INSTANCE]
    assert book.seen(stray, NOW) is None
    other = record("example.com/other", {})
    assert book.seen(other, NOW) is None
    book.seen(beat(), NOW)
    assert book.seen(stray, NOW) == Change(KEY, stray["metadata"]["name"], ring=True, gone=True)
    assert book.views()[0].get(KEY, []) == []


def test_a_lease_moved_to_another_kind_is_filed_once() -> None:
    book = LeaseBook()
    obj = beat()
    book.seen(obj, NOW)
    moved = record(contract.LABEL_BACKUP, {"a": "1"}, name=obj["metadata"]["name"])
    book.seen(moved, NOW)
    heartbeats, _, backups = book.views()
    assert heartbeats.get(KEY, []) == [] and backups.get(KEY) == [{"a": "1"}]


def test_forget_drops_a_cluster_whole() -> None:
    book = LeaseBook()
    book.seen(beat(), NOW)
    book.seen(record(contract.LABEL_MEMBERSHIP, {contract.ANNOTATION_MEMBERSHIP: "{}"}), NOW)
    book.forget(KEY)
    assert book.filed == {} and [dict(v) for v in book.views()] == [{}, {}, {}]
