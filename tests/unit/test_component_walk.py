"""The registry's walk with an in-memory API: every write of a round goes through it, the backup-request
and quorum-loss writes included, and a failed write stops all but what does not depend on it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from raftset import contract, nodeloss
from raftset.operator.components import registry
from raftset.operator.components.backup_requests import BackupRequests
from raftset.operator.components.node_loss import NodeLoss
from raftset.operator.components.quorum_loss import QuorumLoss
from raftset.operator.components.protocol import Round
from raftset.operator.pure import objects
from raftset.operator.pure.planner import Plan, plan
from raftset.operator.pure.scale_step import SCALE_IN
from raftset.quorum_loss import QuorumLossRecord
from raftset.times import rfc3339
from tests.unit.builders import CLUSTER, NOW, body, cluster, members, raft_of

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
        self.calls: list[str] = []  # every write, in order, with what it asked

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
        self.calls.append(f"patch {kind} {name} {json.dumps(patch, sort_keys=True)}")

    async def delete(self, api_version: str, kind: str, namespace: str, name: str, *, uid: str = "",
                     grace_seconds: int | None = None) -> None:
        self.deleted.append((kind, name))
        self.calls.append(f"delete {kind} {name} uid={uid} grace={grace_seconds}")


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


class GenerationsKube(FakeKube):
    """Answers each apply as the apiserver does: with a generation, moved only when the object's spec did."""

    def __init__(self) -> None:
        super().__init__()
        self.generations: dict[str, tuple[int, str]] = {}

    async def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        answer = await super().apply(manifest)
        key, spec = f"{manifest['kind']}/{manifest['metadata']['name']}", json.dumps(manifest.get("spec"), sort_keys=True)
        generation, before = self.generations.get(key, (0, ""))
        self.generations[key] = (generation + (spec != before), spec)
        answer["metadata"] = {**answer["metadata"], "generation": self.generations[key][0]}
        return answer


async def write_round(kube: FakeKube, obj: dict[str, Any], workload: dict[str, Any] | None,
                      applied: Mapping[str, str]) -> Round:
    current, failed = await registry.walk(kube, dataclasses.replace(  # type: ignore[arg-type]
        a_round(obj, workload=workload), applied=applied))
    assert not failed
    return current


async def test_a_round_after_a_write_applies_only_what_it_changes() -> None:
    """A spec change re-renders every component: only the changed manifests reach the apiserver."""
    kube, obj = GenerationsKube(), body(**BACKED_UP)
    first = await write_round(kube, obj, None, {})
    every = [objects.ref(m) for m in kube.applied]
    assert len(every) >= 5 and sorted(ref for ref, _ in first.applying) == sorted(every)

    kube.applied.clear()
    again = await write_round(kube, obj, first.workload, dict(first.applying))
    assert kube.applied == [], "nothing changed, nothing applied"
    assert dict(again.applying) == dict(first.applying), "what was kept is still known as applied"

    changed = body(**{**BACKED_UP, "version": "3.6.16"})
    after = await write_round(kube, changed, again.workload, dict(again.applying))
    assert [m["kind"] for m in kube.applied] == ["StatefulSet"]
    assert after.workload is not None and after.workload["metadata"]["generation"] == 2


async def test_a_workload_edited_or_deleted_by_someone_else_is_applied_again() -> None:
    kube, obj = GenerationsKube(), body(**BACKED_UP)
    first = await write_round(kube, obj, None, {})
    assert first.workload is not None
    edited = {**first.workload, "metadata": {**first.workload["metadata"], "generation": 2}}  # kubectl scale
    kube.applied.clear()
    await write_round(kube, obj, edited, dict(first.applying))
    assert [m["kind"] for m in kube.applied] == ["StatefulSet"]
    kube.applied.clear()
    await write_round(kube, obj, None, dict(first.applying))  # deleted: the round read no workload
    assert [m["kind"] for m in kube.applied] == ["StatefulSet"]


async def test_a_quiet_round_keeps_no_applied_marks() -> None:
    current, _ = await registry.walk(FakeKube(), a_round(body(**BACKED_UP), write=False))  # type: ignore[arg-type]
    assert current.applying == ()


class PatchesKube(FakeKube):
    """Also keeps every merge patch, and serves `objects` on get (the apiserver's copy, not the round's)."""

    def __init__(self, objects: Mapping[tuple[str, str], dict[str, Any]]) -> None:
        super().__init__(objects)
        self.patched: list[tuple[str, Mapping[str, Any]]] = []

    async def merge_patch(self, api_version: str, kind: str, namespace: str, name: str,
                          patch: Mapping[str, Any]) -> None:
        self.patched.append((kind, patch))


def a_lost_quorum_round(workload: dict[str, Any]) -> Round:
    """demo-0 alone answers (its Status, no leader), demo-1 and demo-2 gone; `auto` asked for."""
    voters = members(range(3), 0)
    heartbeats = [dataclasses.replace(voters[0], role=contract.ROLE_UNKNOWN, healthy=False, raft_term=4,
                                      raft_index=120, applied_index=120)] + [
        dataclasses.replace(record, expires=NOW - timedelta(seconds=1)) for record in voters[1:]]
    obj = body(tls={"provider": "disabled"})
    obj["metadata"]["annotations"] = {contract.ANNOTATION_RECOVER_QUORUM: contract.RECOVER_QUORUM_AUTO}
    return Round(cluster=cluster(tls={"provider": "disabled"}), plan=STEADY, workload=workload, marked_pods=(),
                 now=NOW, write=True, body=obj, heartbeats=tuple(heartbeats), raft=raft_of(voters))


def with_record(record: QuorumLossRecord | None) -> dict[str, Any]:
    annotations = {contract.ANNOTATION_QUORUM_RECOVERY: record.to_json()} if record else {}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "demo", "namespace": "db", "resourceVersion": "17", "annotations": annotations},
            "spec": {"replicas": 3}}


async def test_a_recovery_starts_on_the_workload_read_at_that_moment_never_twice() -> None:
    """The round's workload is a watch cache's copy: a recovery another round recorded a moment ago may
    not be in it yet. Starting a second one would restart a survivor that already took writes."""
    running = QuorumLossRecord(id="first", survivor="demo-0", member_id=f"{1:016x}",
                               started=rfc3339(NOW - timedelta(seconds=2)), requested="auto", term=4)
    kube = PatchesKube({("StatefulSet", "demo"): with_record(running)})
    current = await QuorumLoss().sync(kube, a_lost_quorum_round(with_record(None)))  # type: ignore[arg-type]
    written = [p for kind, p in kube.patched if kind == "StatefulSet"
               and contract.ANNOTATION_QUORUM_RECOVERY in p["metadata"].get("annotations", {})]
    assert written == [], f"a second recovery was recorded over {running.id}: {written}"
    (condition,) = current.conditions
    assert "recovery first" in condition.message, condition
    assert contract.ANNOTATION_RECOVER_QUORUM in current.dropped_annotations, "the request is the running one's"


async def test_a_recovery_is_recorded_only_on_the_workload_version_read() -> None:
    kube = PatchesKube({("StatefulSet", "demo"): with_record(None)})
    current = await QuorumLoss().sync(kube, a_lost_quorum_round(with_record(None)))  # type: ignore[arg-type]
    ((kind, patch),) = [(k, p) for k, p in kube.patched if k == "StatefulSet"]
    assert patch["metadata"]["resourceVersion"] == "17", "a write since the read makes the apiserver refuse it"
    assert contract.ANNOTATION_QUORUM_RECOVERY in patch["metadata"]["annotations"]
    assert current.conditions[0].reason == "Recovering"


async def test_no_recovery_starts_on_a_workload_deleted_since_the_round_read_it() -> None:
    kube = PatchesKube({})
    current = await QuorumLoss().sync(kube, a_lost_quorum_round(with_record(None)))  # type: ignore[arg-type]
    assert kube.patched == [] and kube.deleted == []
    assert [(c.status, c.reason) for c in current.conditions] == [(None, "WorkloadGone")]


class PodsKube(FakeKube):
    """`pods` listed for every pod list (an unreachable apiserver when None); no other object listed."""

    def __init__(self, objects: Mapping[tuple[str, str], dict[str, Any]], pods: list[dict[str, Any]] | None) -> None:
        super().__init__(objects)
        self.pods = pods

    async def list(self, api_version: str, kind: str, namespace: str | None, selector: str, *,
                   fields: str = "") -> list[dict[str, Any]]:
        if kind != "Pod":
            return []
        if self.pods is None:
            raise ApiException(status=503, reason="Service Unavailable")
        return self.pods


def a_scale_in_round(disrupted: dict[str, str]) -> tuple[Round, dict[tuple[str, str], dict[str, Any]]]:
    """4 voters on a StatefulSet of 4, desired 3, leader 3 (so the victim): the plan takes the step."""
    heartbeats = members(range(4), 3)
    raft = raft_of(heartbeats)
    c = cluster(replicas=3, tls={"provider": "disabled"})
    live = {"metadata": {"name": "demo", "annotations": {}}, "spec": {"replicas": 4}}
    step = plan(CLUSTER, c.backend, 3, c.backend.scale(live), heartbeats, raft, NOW, serving=frozenset(range(4)))
    assert step.action == SCALE_IN
    budget = {"metadata": {"name": "demo"}, "status": {"disruptedPods": disrupted}}
    current = Round(cluster=c, plan=step, workload=live, marked_pods=(), now=NOW, write=True, body=body(),
                    heartbeats=heartbeats, raft=raft)
    return current, {("PodDisruptionBudget", "demo"): budget}


def running(ordinal: int) -> dict[str, Any]:
    return {"metadata": {"name": f"demo-{ordinal}", "creationTimestamp": "2026-01-01T11:00:00Z"},
            "status": {"phase": "Running"}}


@pytest.mark.parametrize(("disrupted", "taken"), [({}, True), ({"demo-0": "2026-01-01T11:59:59Z"}, False)])
async def test_the_scale_in_step_goes_after_the_budget_left_the_victim_out_and_only_on_the_pods_read_then(
        disrupted: dict[str, str], taken: bool) -> None:
    """An eviction let through just before the budget changed (`disruptedPods`) holds the step (issue 26)."""
    current, objects = a_scale_in_round(disrupted)
    kube = PodsKube(objects, [running(o) for o in range(4)])
    after, failed = await registry.walk(kube, current)  # type: ignore[arg-type]
    kinds = [m["kind"] for m in kube.applied]
    assert not failed and kinds.index("PodDisruptionBudget") < kinds.index("StatefulSet")
    (budget,) = [m for m in kube.applied if m["kind"] == "PodDisruptionBudget"]
    assert budget["spec"]["selector"]["matchExpressions"][0]["values"] == ["demo-3"]
    (workload,) = [m for m in kube.applied if m["kind"] == "StatefulSet"]
    assert workload["spec"]["replicas"] == (3 if taken else 4)
    assert (after.plan.action, after.plan.refused) == ((SCALE_IN, False) if taken else ("wait", True))
    assert taken or "demo-0 not serving" in after.plan.message


async def test_an_unreachable_apiserver_after_the_budget_change_takes_no_step() -> None:
    """The pods cannot be read once the budget left the victim out: no evidence, no step."""
    current, objects = a_scale_in_round({})
    kube = PodsKube(objects, None)
    after, failed = await registry.walk(kube, current)  # type: ignore[arg-type]
    assert failed and after.problem is not None and after.problem[0] == "ApplyFailed"
    assert "StatefulSet" not in [m["kind"] for m in kube.applied]


def _lost_member_objects(annotations: dict[str, str]) -> dict[tuple[str, str], dict[str, Any]]:
    since = rfc3339(NOW - timedelta(seconds=400))
    return {
        ("Pod", "demo-2"): {"metadata": {"name": "demo-2", "uid": "u2", "annotations": annotations},
                            "spec": {"nodeName": "node3"},
                            "status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": since}]}},
        ("PersistentVolumeClaim", "data-demo-2"): {"spec": {"volumeName": "pv-2"}},
        ("PersistentVolume", "pv-2"): {"spec": {"local": {"path": "/mnt/demo-2"}}},
        ("Node", "node3"): {"metadata": {"name": "node3"}, "status": {"conditions": [
            {"type": "Ready", "status": "Unknown", "lastTransitionTime": since}]}},
    }


async def test_node_loss_reads_nothing_while_every_placed_pod_is_ready() -> None:
    kube = FakeKube()
    current = a_round(body())
    assert await NodeLoss().sync(kube, current) is current  # type: ignore[arg-type]
    assert kube.calls == []


async def test_node_loss_marks_a_lost_member_past_the_grace_and_asks_to_be_woken_before() -> None:
    kube = FakeKube(_lost_member_objects({}))
    current = dataclasses.replace(a_round(body()), unready_pods=("demo-2",))
    after = await NodeLoss().sync(kube, current)  # type: ignore[arg-type]
    (call,) = kube.calls
    assert call.startswith("patch Pod demo-2 ") and contract.ANNOTATION_NODE_LOST in call
    assert after.problem and after.problem[0] == "NodeLostReplacing" and after.events[0].reason == "NodeLostReplacing"
    early = dataclasses.replace(current, now=NOW - timedelta(seconds=200))
    waiting = await NodeLoss().sync(FakeKube(_lost_member_objects({})), early)  # type: ignore[arg-type]
    assert waiting.due == NOW - timedelta(seconds=100) and waiting.problem[0] == "NodeLost"  # lost 400 s ago, grace 300


async def test_node_loss_deletes_the_claim_then_the_pod_at_once_after_the_recorded_removal() -> None:
    removal = nodeloss.Removal("abc", "demo-0", rfc3339(NOW), "did not answer")
    kube = FakeKube(_lost_member_objects({contract.ANNOTATION_NODE_LOST_REMOVAL: removal.to_json()}))
    current = dataclasses.replace(a_round(body()), unready_pods=("demo-2",))
    await NodeLoss().sync(kube, current)  # type: ignore[arg-type]
    assert kube.calls == ["delete PersistentVolumeClaim data-demo-2 uid= grace=None",
                          "delete Pod demo-2 uid=u2 grace=0"]


async def test_node_loss_that_may_not_read_nodes_says_so_and_the_round_goes_on() -> None:
    class Forbidden(FakeKube):
        async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
            if kind == "Node":
                raise ApiException(status=403, reason="Forbidden")
            return await super().get(api_version, kind, namespace, name)

    kube = Forbidden(_lost_member_objects({}))
    current = dataclasses.replace(a_round(body()), unready_pods=("demo-2",))
    after = await NodeLoss().sync(kube, current)  # type: ignore[arg-type]
    assert after.problem is not None and after.problem[0] == "NodeStateUnreadable" and kube.calls == []
