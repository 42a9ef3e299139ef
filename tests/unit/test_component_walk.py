"""The registry's walk with an in-memory API: every write of a round goes through it, the backup-request
and quorum-loss writes included, and a failed write stops all but what does not depend on it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from raftset import contract
from raftset.operator.components import registry
from raftset.operator.components.backup_requests import BackupRequests
from raftset.operator.components.protocol import Round
from raftset.operator.pure.planner import Plan
from tests.unit.builders import NOW, body, cluster

pytestmark = pytest.mark.unit

STEADY = Plan(replicas=3, reserved=(), action="steady", message="")
BACKED_UP = {"backup": {"pvc": {"claimName": "etcd-backups"}}, "tls": {"provider": "disabled"}}


class FakeKube:
    """The KubeAPI protocol over a dict; `refuse` names kinds whose apply the apiserver refuses."""

    def __init__(self, objects: Mapping[tuple[str, str], dict[str, Any]] = (), refuse: tuple[str, ...] = ()) -> None:
        self.objects = dict(objects)
        self.refuse = refuse
        self.applied: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str]] = []

    async def has_api(self, api_version: str, kind: str) -> bool:
        return True

    async def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        if manifest["kind"] in self.refuse:
            raise ApiException(status=422, reason="Unprocessable")
        self.applied.append(dict(manifest))
        return dict(manifest)

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, name))

    async def list(self, api_version: str, kind: str, namespace: str | None, selector: str, *,
                   fields: str = "") -> list[dict[str, Any]]:
        return []

    async def merge_patch(self, api_version: str, kind: str, namespace: str, name: str,
                          patch: Mapping[str, Any]) -> None:
        return None

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self.deleted.append((kind, name))


def a_round(obj: dict[str, Any], *, workload: dict[str, Any] | None = None, write: bool = True) -> Round:
    return Round(cluster=cluster(**obj["spec"]), plan=STEADY, workload=workload, marked_pods=(), now=NOW,
                 write=write, body=obj)


def asking(annotation: str, value: str) -> dict[str, Any]:
    obj = body(**BACKED_UP)
    obj["metadata"]["annotations"] = {annotation: value}
    return obj


async def test_a_backup_now_request_is_taken_by_its_component() -> None:
    obj = asking(contract.ANNOTATION_BACKUP_NOW, "")
    kube = FakeKube({(contract.KIND_ETCD, "demo"): obj})
    current = await BackupRequests().sync(kube, a_round(obj))  # type: ignore[arg-type]
    (lease,) = [m for m in kube.applied if m["kind"] == "Lease"]
    request = lease["metadata"]["annotations"][contract.ANNOTATION_BACKUP_REQUEST]
    assert [e.reason for e in current.events] == ["BackupRequested"]
    assert request in current.events[0].message
    assert current.dropped_annotations == (contract.ANNOTATION_BACKUP_NOW,)


async def test_no_request_no_write() -> None:
    obj = body(**BACKED_UP)
    kube = FakeKube({(contract.KIND_ETCD, "demo"): obj})
    current = await BackupRequests().sync(kube, a_round(obj))  # type: ignore[arg-type]
    assert kube.applied == [] and current.events == () and current.dropped_annotations == ()


async def test_a_failed_write_stops_the_walk_but_the_quorum_loss_component_still_runs() -> None:
    obj = body(**BACKED_UP)
    kube = FakeKube(refuse=("Service",))
    live = {"metadata": {"name": "demo", "annotations": {}}, "spec": {}}
    current, failed = await registry.walk(kube, a_round(obj, workload=live))  # type: ignore[arg-type]
    assert failed and current.problem is not None and current.problem[0] == "ApplyFailed"
    kinds = [m["kind"] for m in kube.applied]
    assert "Role" in kinds, "the components before the refused one wrote"
    assert "PodDisruptionBudget" not in kinds and "StatefulSet" not in kinds, "none after it but quorum loss"
    assert [c.type for c in current.conditions] == ["QuorumLost"], "the quorum-loss component ran"


async def test_a_quiet_round_writes_nothing_but_still_decides_quorum_loss() -> None:
    obj = body(**BACKED_UP)
    kube = FakeKube()
    live = {"metadata": {"name": "demo", "annotations": {}}, "spec": {}}
    current, failed = await registry.walk(kube, a_round(obj, workload=live, write=False))  # type: ignore[arg-type]
    assert not failed and kube.applied == [] and kube.deleted == []
    assert [c.type for c in current.conditions] == ["QuorumLost"]
