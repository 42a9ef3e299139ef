"""A member lost with its node (raftset.operator.pure.nodeloss and the records in raftset.nodeloss): marked
only past the grace and only with its data on that node, one at a time; its pod and claim re-created only
after the leader's sidecar recorded the member's removal; a node that returns withdraws the mark."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from raftset import contract, nodeloss
from raftset.membership import RaftMember, RaftMembership
from raftset.operator.pure.nodeloss import (NodeState, Suspect, bound_to_one_node, decide, node_state, pinned_node,
                                            suspect)
from raftset.times import rfc3339
from tests.unit.builders import NOW

pytestmark = pytest.mark.unit

GRACE = 300
LOST_AT = NOW - timedelta(seconds=GRACE + 1)
MARK = nodeloss.Mark("node3", rfc3339(LOST_AT), rfc3339(NOW))
REMOVAL = nodeloss.Removal("8e9e05c52164694d", "demo-0", rfc3339(NOW), "did not answer")


def lost(ordinal: int = 2, *, mark: nodeloss.Mark | None = None, removal: nodeloss.Removal | None = None,
         node_bound: bool = True, requested: bool = False, node: str = "node3") -> Suspect:
    return Suspect(pod=f"demo-{ordinal}", uid=f"uid-{ordinal}", ordinal=ordinal, node=node, unready_since=LOST_AT,
                   mark=mark, removal=removal, replace_requested=requested, claim=f"data-demo-{ordinal}",
                   node_bound=node_bound)


def nodes(*, ready: bool = False, since: Any = LOST_AT) -> dict[str, NodeState]:
    return {"node3": NodeState("node3", ready, since), "node4": NodeState("node4", False, LOST_AT)}


def raft(answering: set[int]) -> RaftMembership:
    return RaftMembership("a", "demo-0", 2, 100, tuple(
        RaftMember(f"{o:x}", f"demo-{o}", o, (), False, True, 50 if o in answering else None, None) for o in range(3)),
        rfc3339(NOW))


def run(suspects: list[Suspect], node_states: dict[str, NodeState] | None = None, *, answering: set[int] = {0, 1},
        policy: str = "Automatic", now: Any = NOW):
    return decide(suspects, nodes() if node_states is None else node_states, raft(answering), policy=policy,
                  grace_seconds=GRACE, now=now)


def test_a_member_whose_node_is_lost_past_the_grace_is_marked_once() -> None:
    got = run([lost()])
    assert got.mark == (("demo-2", nodeloss.Mark("node3", rfc3339(LOST_AT), rfc3339(NOW))),)
    assert got.recreate == () and got.unmark == () and got.due is None
    assert [e.reason for e in got.events] == ["NodeLostReplacing"] and got.problem[0] == "NodeLostReplacing"


def test_before_the_grace_it_is_only_reported_with_the_moment_it_will_be_replaced() -> None:
    got = run([lost()], now=LOST_AT + timedelta(seconds=100))
    assert got.mark == () and got.events == ()
    assert got.due == LOST_AT + timedelta(seconds=GRACE)
    assert got.problem[0] == "NodeLost" and rfc3339(got.due) in got.problem[1] and "unless the node comes back" in got.problem[1]


def test_a_ready_node_marks_nothing_and_withdraws_a_mark_not_yet_acted_on() -> None:
    assert run([lost()], nodes(ready=True)) == run([], nodes(ready=True))
    got = run([lost(mark=MARK)], nodes(ready=True))
    assert got.unmark == ("demo-2",) and [e.reason for e in got.events] == ["NodeLostReturned"] and got.problem is None


def test_a_recorded_removal_re_creates_the_pod_and_claim_whatever_the_node_says_now() -> None:
    """The member is out of Raft: its data is of no use anywhere, on a node that came back too."""
    for node_states in (nodes(), nodes(ready=True)):
        got = run([lost(mark=MARK, removal=REMOVAL)], node_states)
        assert got.recreate == (lost(mark=MARK, removal=REMOVAL),) and got.mark == () and got.unmark == ()
        assert [e.reason for e in got.events] == ["NodeLostRecreating"]
        assert "data-demo-2" in got.events[0].message and REMOVAL.member in got.events[0].message


def test_a_marked_member_the_leader_still_hears_is_reported_as_serving_and_nothing_more() -> None:
    got = run([lost(mark=MARK)], answering={0, 1, 2})
    assert (got.mark, got.recreate, got.events) == ((), (), ())
    assert got.problem[0] == "NodeLostServing" and "cut off from the API server" in got.problem[1]
    waiting = run([lost(mark=MARK)])
    assert waiting.problem[0] == "NodeLostReplacing" and waiting.mark == ()


def test_a_claim_that_can_follow_its_pod_is_never_touched_only_reported() -> None:
    got = run([lost(node_bound=False)])
    assert (got.mark, got.recreate, got.due) == ((), (), None)
    assert got.problem[0] == "NodeLost" and "--force" in got.problem[1] and "two members on one volume" in got.problem[1]


def test_manual_reports_and_waits_for_the_replace_request_then_marks_without_a_grace() -> None:
    got = run([lost()], policy="Manual")
    assert got.mark == () and got.problem[0] == "NodeLost" and contract.ANNOTATION_REPLACE in got.problem[1]
    early = LOST_AT + timedelta(seconds=5)
    asked = run([lost(requested=True)], policy="Manual", now=early)
    assert [pod for pod, _ in asked.mark] == ["demo-2"]


def test_one_member_at_a_time() -> None:
    both = run([lost(1, node="node4"), lost(2)])
    assert [pod for pod, _ in both.mark] == ["demo-1"]
    assert run([lost(1, node="node4"), lost(2, mark=MARK)]).mark == (), "demo-2 is still being replaced"
    after = run([lost(1, node="node4"), lost(2, mark=MARK, removal=REMOVAL)])
    assert [pod for pod, _ in after.mark] == ["demo-1"], "a removed member no longer holds the turn"


def test_a_pod_not_ready_on_a_ready_node_is_not_a_node_loss() -> None:
    assert run([lost()], nodes(ready=True)).problem is None


def test_a_node_object_gone_counts_from_the_pods_own_readiness() -> None:
    got = run([lost(node="node9")], {})
    assert [pod for pod, _ in got.mark] == ["demo-2"]


def pod(name: str = "demo-2", *, ready: str | None = "False", node: str | None = "node3",
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": ready, "lastTransitionTime": rfc3339(LOST_AT)}] if ready else []
    return {"metadata": {"name": name, "uid": "u2", "annotations": annotations or {}},
            "spec": {"nodeName": node} if node else {}, "status": {"conditions": conditions}}


def test_a_pod_is_read_with_its_records_and_readiness() -> None:
    got = suspect(pod(annotations={contract.ANNOTATION_NODE_LOST: MARK.to_json(),
                                   contract.ANNOTATION_NODE_LOST_REMOVAL: REMOVAL.to_json(),
                                   contract.ANNOTATION_REPLACE: "true"}), "demo", claim="data-demo-2", node_bound=True)
    assert got == Suspect("demo-2", "u2", 2, "node3", LOST_AT, MARK, REMOVAL, True, "data-demo-2", True)
    assert suspect(pod(ready="True"), "demo", claim=None, node_bound=True).unready_since is None
    assert suspect(pod(node=None), "demo", claim=None, node_bound=True) is None
    assert suspect(pod("demo-canary"), "demo", claim=None, node_bound=True) is None
    garbled = suspect(pod(annotations={contract.ANNOTATION_NODE_LOST: "{not json",
                                       contract.ANNOTATION_NODE_LOST_REMOVAL: '{"member": 5}'}),
                      "demo", claim=None, node_bound=True)
    assert garbled is not None and (garbled.mark, garbled.removal) == (None, None)


def test_a_node_is_read_by_its_ready_condition() -> None:
    node = {"metadata": {"name": "node3"}, "status": {"conditions": [
        {"type": "MemoryPressure", "status": "False"},
        {"type": "Ready", "status": "Unknown", "lastTransitionTime": rfc3339(LOST_AT)}]}}
    assert node_state(node) == NodeState("node3", False, LOST_AT)
    assert node_state({"metadata": {"name": "x"}}) == NodeState("x", False, None)


@pytest.mark.parametrize(("spec", "bound"), [
    ({"local": {"path": "/mnt/disk"}, "nodeAffinity": {}}, True),
    ({"hostPath": {"path": "/tmp/x"}}, True),
    ({"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node3"]}]}]}}}, True),
    ({"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}]}}}, False),
    ({"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node3", "node4"]}]}]}}}, False),
    ({"csi": {"driver": "ebs.csi.aws.com"}}, False),
    (None, False),
])
def test_a_volume_lives_on_one_node_only_when_it_says_so(spec: dict[str, Any] | None, bound: bool) -> None:
    assert bound_to_one_node({"spec": spec} if spec is not None else None) is bound


def test_the_records_read_back_and_refuse_what_is_not_theirs() -> None:
    assert nodeloss.parse_mark(MARK.to_json()) == MARK
    assert nodeloss.parse_removal(REMOVAL.to_json()) == REMOVAL
    assert nodeloss.parse_mark('{"node": 3, "since": "x", "marked": "y"}') is None
    assert nodeloss.parse_mark(None) is None and nodeloss.parse_removal("") is None


def test_the_round_that_marks_and_the_rounds_after_say_the_same_so_degraded_warns_once() -> None:
    marking = run([lost()])
    after = run([lost(mark=MARK)])
    assert marking.problem == after.problem and marking.problem[0] == "NodeLostReplacing"


def test_a_node_not_ready_for_a_moment_is_not_reported_yet_only_looked_at_again() -> None:
    from raftset.operator.pure.nodeloss import QUIET
    blip = run([lost()], now=LOST_AT + QUIET - timedelta(seconds=1))
    assert (blip.problem, blip.mark, blip.events) == (None, (), ()) and blip.due == LOST_AT + QUIET
    short = decide([lost()], nodes(), raft({0, 1}), policy="Automatic", grace_seconds=30,
                   now=LOST_AT + timedelta(seconds=16))
    assert short.problem is not None and short.problem[0] == "NodeLost", "at most half the grace"


# A Node object deleted with its node (a cloud node removed): Kubernetes' pod garbage collector deletes
# the node's pods, the StatefulSet makes them anew, and a pod whose local volume is pinned to the gone
# node waits unscheduled for ever. It is read as a suspect on the node its volume names.
def unscheduled(name: str = "demo-2", *, reason: str = "Unschedulable") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": "u9", "annotations": {}}, "spec": {},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": reason, "lastTransitionTime": rfc3339(LOST_AT)}]}}


def test_an_unscheduled_pod_is_read_on_the_node_its_volume_is_pinned_to() -> None:
    got = suspect(unscheduled(), "demo", claim="data-demo-2", node_bound=True, pinned="node3")
    assert got == Suspect("demo-2", "u9", 2, "node3", LOST_AT, None, None, False, "data-demo-2", True)
    assert suspect(unscheduled(), "demo", claim="data-demo-2", node_bound=True, pinned=None) is None
    assert suspect(unscheduled(reason="SchedulerError"), "demo", claim=None, node_bound=True, pinned="node3") is None
    assert suspect(pod(node=None), "demo", claim=None, node_bound=True, pinned="node3") is None, "not refused yet"


def test_a_deleted_node_is_named_as_such_and_its_member_replaced_after_the_grace() -> None:
    early = run([lost(node="node9")], {}, now=LOST_AT + timedelta(seconds=100))
    assert early.mark == () and early.problem[0] == "NodeLost"
    assert "no longer lists" in early.problem[1] and "unless the node comes back" in early.problem[1]
    got = run([lost(node="node9")], {})
    assert got.mark == (("demo-2", nodeloss.Mark("node9", rfc3339(LOST_AT), rfc3339(NOW))),)
    assert "no longer lists" in got.events[0].message


@pytest.mark.parametrize(("spec", "node"), [
    ({"local": {"path": "/mnt/disk"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node3"]}]}]}}}, "node3"),
    ({"hostPath": {"path": "/tmp/x"}}, None),
    ({"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node3", "node4"]}]}]}}}, None),
    ({"nodeAffinity": {"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node3"]}]},
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node4"]}]}]}}}, None),
    ({"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}]}}}, None),
    (None, None),
])
def test_a_volume_names_its_node_only_when_pinned_to_exactly_one(spec: dict[str, Any] | None, node: str | None) -> None:
    assert pinned_node({"spec": spec} if spec is not None else None) == node
