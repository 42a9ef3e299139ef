"""Version changes a running cluster may make: one minor forward at a time, from a recent enough patch."""

from __future__ import annotations

import pytest

from raftset import engines
from raftset.operator.pure import versions
from raftset.operator.pure import spec
from raftset.operator.pure.planner import Plan
from raftset.operator.pure.status import running_version, status
from tests.unit.builders import NOW, body, cluster

pytestmark = pytest.mark.unit
FLOORS = engines.ETCD.upgrade_floors


@pytest.mark.parametrize(("running", "wanted", "refused"), [
    (None, "3.7.3", None),  # nothing recorded yet
    ("3.6.16", "3.6.16", None),
    ("3.6.2", "3.6.16", None),
    ("3.5.35", "3.6.16", None),
    ("3.6.16", "3.7.3", None),
    ("3.5.35", "3.7.3", "skips a minor"),
    ("3.6.16", "4.0.0", "skips a minor"),
    ("3.7.3", "3.6.16", "downgrades"),
    ("3.6.16", "3.6.2", "downgrades"),
    ("3.5.17", "3.6.16", "3.5.32 or later"),
    ("3.5.17", "3.5.35", None),  # the way there: the newest 3.5 patch first
    ("3.6.10", "3.7.3", "3.6.11 or later"),
])
def test_refusal(running: str | None, wanted: str, refused: str | None) -> None:
    message = versions.refusal(running, wanted, FLOORS)
    assert (message is None) == (refused is None), message
    if refused:
        assert refused in message


@pytest.mark.parametrize(("image", "version"), [
    ("gcr.io/etcd-development/etcd:v3.6.16", "3.6.16"),
    ("registry:5000/etcd:v3.5.35", "3.5.35"),
    ("registry:5000/etcd", None),
    ("etcd@sha256:abc", None),
    ("etcd:latest", None),
])
def test_of_image(image: str, version: str | None) -> None:
    assert versions.of_image(image) == version


def test_the_parser_refuses_a_skip_against_the_running_version() -> None:
    obj = body(version="3.7.3")
    obj["status"] = {"version": "3.5.35"}
    with pytest.raises(spec.InvalidSpec) as refused:
        spec.parse(obj, default_workload_kind="StatefulSet")
    assert refused.value.reason == "VersionChangeRefused"
    obj["spec"]["image"] = "mirror.example/etcd:custom"  # an override names no version
    assert spec.parse(obj, default_workload_kind="StatefulSet").image == "mirror.example/etcd:custom"


def rolled(image: str, *, updated: int = 3, observed: int = 4) -> dict:
    return {"metadata": {"generation": 4},
            "spec": {"template": {"spec": {"containers": [{"name": "etcd", "image": image}]}}},
            "status": {"observedGeneration": observed, "updatedReplicas": updated, "replicas": 3,
                       "updateRevision": "r2"}}


def test_the_running_version_moves_once_every_pod_runs_the_template() -> None:
    image = "gcr.io/etcd-development/etcd:v3.6.16"
    assert running_version(rolled(image), "etcd") == "3.6.16"
    assert running_version(rolled(image, updated=2), "etcd") is None
    assert running_version(rolled(image, observed=3), "etcd") is None
    assert running_version(None, "etcd") is None


def test_status_keeps_the_recorded_version_while_a_roll_runs() -> None:
    c = cluster(version="3.6.16")
    steady = Plan(replicas=3, reserved=(), action="steady", message="")
    mid_roll = rolled("gcr.io/etcd-development/etcd:v3.6.16", updated=1)
    assert status(c, steady, mid_roll, [], {"version": "3.5.35"}, 4, NOW)["version"] == "3.5.35"
    done = rolled("gcr.io/etcd-development/etcd:v3.6.16")
    assert status(c, steady, done, [], {"version": "3.5.35"}, 4, NOW)["version"] == "3.6.16"
    created = Plan(replicas=3, reserved=(), action="create", message="")
    assert status(c, created, None, [], {}, 1, NOW)["version"] == "3.6.16"
