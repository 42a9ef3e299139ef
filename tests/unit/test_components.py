"""The operator's component registry: order, pod marks, what a writing round renders."""

from __future__ import annotations

import pytest

from raftset.operator.components import registry
from raftset.operator.components.disruption_budget import current_voters
from raftset.operator.components.pod_marks import pod_marks
from raftset.operator.components.protocol import Round
from raftset.operator.pure.planner import Plan
from tests.unit.builders import NOW, cluster, owned_objects, raft, raft_member

pytestmark = pytest.mark.unit


def test_components_run_upstream_first() -> None:
    """Pods must find their Secrets and claim sizes; the workload goes after its objects; the quorum-loss
    writes go last, on the workload the round settled (backup requests wait for nothing). A scale-in step's
    guard reads the pods after the budget left the victim out, and before the workload takes the step."""
    names = [c.name for c in registry.COMPONENTS]
    assert names == ["backup-requests", "tls", "claims", "pod-marks", "member-rbac", "services", "disruption-budget",
                     "scale-in-guard", "workload", "pod-restarts", "leases", "node-loss", "quorum-loss"]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(("scale_away", "marked", "expected"), [
    ((), (), {}),
    (("demo-2",), (), {"demo-2": "true"}),
    (("demo-2",), ("demo-2",), {"demo-2": "true"}),
    ((), ("demo-1",), {"demo-1": None}),  # kept after all: the mark goes
    ((), ("demo-5",), {}),  # not kept and not a victim of this plan: left to the sidecar
    ((), ("demo-canary", "other-1"), {}),  # strays with the cluster's labels: left alone (issue 11 i)
])
def test_pod_marks_follow_the_plan(scale_away: tuple[str, ...], marked: tuple[str, ...],
                                   expected: dict[str, str | None]) -> None:
    plan = Plan(replicas=3, reserved=(), action="scale-in", message="", scale_away=scale_away)
    assert pod_marks("demo", plan, marked) == expected


def test_a_step_finds_the_first_problem() -> None:
    plan = Plan(replicas=3, reserved=(), action="steady", message="")
    step = Round(cluster=cluster(), plan=plan, workload=None, marked_pods=(), now=None, write=False)  # type: ignore[arg-type]
    step = step.found(None, tls_revision="1").found(("TLSBroken", "a"), claims=None).found(("ClaimsBroken", "b"))
    assert (step.tls_revision, step.problem) == ("1", ("TLSBroken", "a"))


def test_the_workload_renders_with_what_upstream_components_found() -> None:
    workload = owned_objects(cluster(), 3, [1], tls_revision="4")[-1]
    assert workload["kind"] == "StatefulSet"
    assert workload["spec"]["template"]["metadata"]["annotations"]["raftset.dev/tls-revision"] == "4"


@pytest.mark.parametrize(("kept", "raft_voters", "learners", "expected"), [
    (3, None, 0, 3),  # no membership published: the pods the workload runs
    (4, 5, 0, 5),  # mid 5 -> 3: the victim is still a voter
    (5, 4, 0, 5),  # mid scale-out: the new pod's member is not a voter yet
    (3, 3, 1, 3),  # learners do not vote
])
def test_current_voters_is_the_larger_of_raft_and_the_workload(kept: int, raft_voters: int | None, learners: int,
                                                               expected: int) -> None:
    membership = None
    if raft_voters is not None:
        membership = raft([*(raft_member(o) for o in range(raft_voters)),
                           *(raft_member(9 - o, learner=True) for o in range(learners))], 0)
    plan = Plan(kept, (), "steady", "")
    step = Round(cluster=cluster(replicas=3), plan=plan, workload=None, marked_pods=(), now=NOW,
                           write=True, raft=membership)
    assert current_voters(step) == expected
    pdb = next(o for o in registry.rendered(step) if o["kind"] == "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == expected // 2 + 1
