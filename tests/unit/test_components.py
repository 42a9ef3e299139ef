"""The operator's component registry: order, pod marks, what a writing step renders."""

from __future__ import annotations

import pytest

from raftset.operator import components
from raftset.operator.planner import Plan
from tests.unit.builders import cluster, owned_objects

pytestmark = pytest.mark.unit


def test_components_run_upstream_first() -> None:
    """Pods must find their Secrets and claim sizes; the workload goes last."""
    names = [c.name for c in components.COMPONENTS]
    assert names == ["tls", "claims", "pod-marks", "member-rbac", "services", "disruption-budget",
                     "workload", "pod-restarts", "leases"]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(("scale_away", "marked", "expected"), [
    ((), (), {}),
    (("demo-2",), (), {"demo-2": "true"}),
    (("demo-2",), ("demo-2",), {"demo-2": "true"}),
    ((), ("demo-1",), {"demo-1": None}),  # kept after all: the mark goes
    ((), ("demo-5",), {}),  # not kept and not a victim of this plan: left to the sidecar
])
def test_pod_marks_follow_the_plan(scale_away: tuple[str, ...], marked: tuple[str, ...],
                                   expected: dict[str, str | None]) -> None:
    plan = Plan(replicas=3, reserved=(), action="scale-in", message="", scale_away=scale_away)
    assert components.pod_marks(plan, marked) == expected


def test_a_step_finds_the_first_problem() -> None:
    plan = Plan(replicas=3, reserved=(), action="steady", message="")
    step = components.Step(cluster=cluster(), plan=plan, workload=None, marked_pods=(), now=None, write=False)  # type: ignore[arg-type]
    step = step.found(None, tls_revision="1").found(("TLSBroken", "a"), claims=None).found(("ClaimsBroken", "b"))
    assert (step.tls_revision, step.problem) == ("1", ("TLSBroken", "a"))


def test_the_workload_renders_with_what_upstream_components_found() -> None:
    workload = owned_objects(cluster(), 3, [1], tls_revision="4")[-1]
    assert workload["kind"] == "StatefulSet"
    assert workload["spec"]["template"]["metadata"]["annotations"]["raftset.dev/tls-revision"] == "4"
