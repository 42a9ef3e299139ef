"""The narration shell: each untold step applied as its own named Event, counted only once applied."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from raftset.contract import ReplacePhase as P
from raftset.operator.components import narration
from raftset.replace import Progress

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
BODY = kopf.Body({"apiVersion": "raftset.dev/v1alpha1", "kind": "EtcdCluster",
                  "metadata": {"name": "demo", "namespace": "ns", "uid": "u1"}})
DONE = {"pod": "demo-2", "requested": False, "progress": Progress(
    P.DONE, "a1", "b2", "votes", (P.REMOVING, P.REJOINING, P.LEARNER, P.DONE), "asked for", "r1").to_json()}


class Kube:
    def __init__(self, refuse_after: int | None = None) -> None:
        self.applied: list[dict[str, Any]] = []
        self.refuse_after = refuse_after

    async def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        if self.refuse_after is not None and len(self.applied) >= self.refuse_after:
            raise ApiException(status=500, reason="apiserver busy")
        self.applied.append(manifest)
        return manifest


async def test_every_untold_step_is_applied_as_its_own_named_event_and_counted() -> None:
    kube = Kube()
    memory = await narration.tell_replace_steps(kube, BODY, [DONE], [], NOW)  # type: ignore[arg-type]
    assert [m["metadata"]["name"] for m in kube.applied] == [f"demo.replace-demo-2-r1-{i}" for i in range(4)]
    assert [m["reason"] for m in kube.applied] == ["ReplaceRemoving", "ReplaceRejoining", "ReplaceLearner", "Replaced"]
    assert kube.applied[-1]["involvedObject"] == {"apiVersion": "raftset.dev/v1alpha1", "kind": "EtcdCluster",
                                                  "name": "demo", "namespace": "ns", "uid": "u1"}
    assert memory == [{"pod": "demo-2", "replacement": "r1", "steps": 4}]
    again = Kube()
    assert await narration.tell_replace_steps(again, BODY, [DONE], memory, NOW) == memory  # type: ignore[arg-type]
    assert again.applied == []


async def test_a_refused_event_stops_the_telling_there_and_the_next_reconcile_goes_on_from_it() -> None:
    kube = Kube(refuse_after=2)
    memory = await narration.tell_replace_steps(kube, BODY, [DONE], [], NOW)  # type: ignore[arg-type]
    assert memory == [{"pod": "demo-2", "replacement": "r1", "steps": 2}]
    later = Kube()
    await narration.tell_replace_steps(later, BODY, [DONE], memory, NOW)  # type: ignore[arg-type]
    assert [m["reason"] for m in later.applied] == ["ReplaceLearner", "Replaced"]
