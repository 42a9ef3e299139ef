"""Issue 28: how the operator's Lease watch reads one event line (no connection is made)."""

from __future__ import annotations

import pytest
from kubernetes.aio.client import ApiClient, Configuration

from raftset import contract
from raftset.operator.io.leasewatch import Gone, LeaseWatch
from raftset.operator.pure.leasebook import Change, LeaseBook

pytestmark = pytest.mark.unit


def reader() -> tuple[LeaseWatch, list[Change]]:
    changes: list[Change] = []
    return LeaseWatch(ApiClient(Configuration()), LeaseBook(), [], changes.append), changes


def backup(version: str) -> dict:
    return {"metadata": {"name": "demo-backup", "namespace": "db", "resourceVersion": version,
                         "labels": {contract.LABEL_BACKUP: "true", contract.LABEL_INSTANCE: "demo"}}}


def test_a_version_too_old_is_gone_and_another_error_fails_the_request() -> None:
    watch, _ = reader()
    with pytest.raises(Gone):
        watch._event({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}, "5")
    with pytest.raises(ValueError, match="forbidden"):
        watch._event({"type": "ERROR", "object": {"code": 403, "message": "forbidden"}}, "5")


def test_events_carry_the_version_to_resume_from_and_a_bookmark_changes_nothing() -> None:
    watch, changes = reader()
    assert watch._event({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "8"}}}, "5") == "8"
    assert changes == []
    assert watch._event({"type": "ADDED", "object": backup("9")}, "8") == "9"
    assert watch._event({"type": "DELETED", "object": backup("10")}, "9") == "10"
    assert [(c.key, c.ring, c.gone) for c in changes] == [(("db", "demo"), True, False), (("db", "demo"), True, True)]
