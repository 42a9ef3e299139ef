"""Issue 28: how the operator's own watches read one event line (no connection is made)."""

from __future__ import annotations

import pytest
from kubernetes.aio.client import ApiClient, Configuration

from raftset import contract
from raftset.operator import watches
from raftset.operator.io.objectwatch import Gone, ObjectWatch
from raftset.operator.pure.books import Change
from raftset.operator.pure.leasebook import LeaseBook

pytestmark = pytest.mark.unit


def reader() -> tuple[ObjectWatch, list[Change]]:
    changes: list[Change] = []
    return ObjectWatch(ApiClient(Configuration()), watches.LEASES, contract.LABEL_INSTANCE, LeaseBook(), [],
                       changes.append), changes


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


def test_each_resource_is_watched_at_its_collection_path() -> None:
    assert watches.LEASES.path("db") == "/apis/coordination.k8s.io/v1/namespaces/db/leases"
    assert watches.PODS.path(None) == "/api/v1/pods"
    assert watches.WORKLOADS["AdvancedStatefulSet"].path("db") == "/apis/apps.kruise.io/v1beta1/namespaces/db/statefulsets"
