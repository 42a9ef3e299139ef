"""The cluster's status: conditions, their transitions and the published fields, from plain data."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from raftset import contract
from raftset.operator.pure import planner
from raftset.operator.pure.planner import Plan
from raftset.operator.pure.settings import OperatorSettings
from raftset.operator.pure.status import (
    PLAINTEXT_WARNING,
    UNAVAILABLE_GRACE_SECONDS,
    Condition,
    announcements,
    conditions,
    degraded,
    merge_conditions,
    patch_due,
    status,
)
from raftset.workloads import ADVANCED_STATEFULSET, STATEFULSET
from raftset.times import rfc3339
from tests.unit.builders import NOW, cluster, member, members, raft, raft_member

pytestmark = pytest.mark.unit

LEADER, FOLLOWER, LEARNER = contract.ROLE_LEADER, contract.ROLE_FOLLOWER, contract.ROLE_LEARNER
STEADY3 = Plan(3, (), "steady", "3 members as desired")


def by_type(found: list[Condition]) -> dict[str, Condition]:
    return {c.type: c for c in found}


def brief(found: list[Condition]) -> dict[str, tuple[bool, str]]:
    return {c.type: (c.status, c.reason) for c in found}


# --- conditions ---------------------------------------------------------------------

def test_a_healthy_settled_cluster() -> None:
    found = conditions(cluster(), STEADY3, members(range(3), leader=1), NOW, None)
    assert brief(found) == {
        "Available": (True, "QuorumHealthy"), "Progressing": (False, "Settled"),
        "Degraded": (False, "AsExpected"), "Encrypted": (True, "TLS"), "OddReplicas": (True, "OddReplicas")}
    assert by_type(found)["Available"].message == \
        "3 of 3 members healthy, 3 serving linearizable reads, leader demo-1"


def test_an_invalid_spec_blocks_everything_and_names_the_problem() -> None:
    found = conditions(None, None, [], NOW, ("InvalidSpec", "spec.replicas: must be at least 1"))
    assert brief(found) == {
        "Available": (False, "NotReconciled"), "Progressing": (False, "Blocked"),
        "Degraded": (True, "InvalidSpec")}
    assert by_type(found)["Degraded"].message == "spec.replicas: must be at least 1"


def test_a_missing_workload_api_keeps_the_encryption_condition() -> None:
    problem = ("WorkloadAPIMissing", "install OpenKruise")
    found = conditions(cluster(tls={"provider": "disabled"}), None, [], NOW, problem)
    assert brief(found)["Degraded"] == (True, "WorkloadAPIMissing")
    assert brief(found)["Encrypted"] == (False, "TLSDisabled")


@pytest.mark.parametrize("provider", ["auto", "cert-manager"])
def test_encrypted_names_the_provider(provider: str) -> None:
    found = by_type(conditions(cluster(tls={"provider": provider}), STEADY3, members(range(3), 0), NOW, None))
    assert found["Encrypted"] == Condition("Encrypted", True, "TLS",
                                           f"peer and client traffic use TLS (provider {provider})")


def test_plaintext_is_a_warning_condition_not_a_fault() -> None:
    found = by_type(conditions(cluster(tls={"provider": "disabled"}), STEADY3, members(range(3), 0), NOW, None))
    assert found["Encrypted"] == Condition("Encrypted", False, "TLSDisabled", PLAINTEXT_WARNING)
    assert "plain HTTP" in PLAINTEXT_WARNING
    assert found["Degraded"].status is False and found["Available"].status is True


def test_no_leader_is_unavailable() -> None:
    found = by_type(conditions(cluster(), STEADY3, members(range(3), leader=None), NOW, None))
    assert (found["Available"].status, found["Available"].reason) == (False, "NoLeader")


def test_a_stale_leader_record_is_no_leader() -> None:
    records = members(range(3), leader=0, overrides={0: {"age": 31}})
    found = by_type(conditions(cluster(), STEADY3, records, NOW, None))
    assert found["Available"].reason == "NoLeader"


@pytest.mark.parametrize(("healthy", "available"), [(3, True), (2, True), (1, False)])
def test_available_needs_a_quorum_of_healthy_voters(healthy: int, available: bool) -> None:
    sick = {o: {"healthy": False} for o in range(healthy, 3)}
    found = by_type(conditions(cluster(), STEADY3, members(range(3), 0, sick), NOW, None))
    assert found["Available"].status is available
    if not available:
        assert found["Available"].reason == "QuorumLost"
        assert found["Available"].message == "1 of 3 members healthy, 2 needed"


def test_every_member_answering_status_but_no_read_committing_is_not_available() -> None:
    """Issue 30, bug 4: Status names a leader on every member, yet no linearizable read commits
    (an isolated leader before CheckQuorum steps it down, a paused majority, an engine that cannot
    commit): the cluster serves nothing, whatever its Status says."""
    records = members(range(3), 0, {o: {"ready": False} for o in range(3)})
    found = by_type(conditions(cluster(), STEADY3, records, NOW, None))
    assert (found["Available"].status, found["Available"].reason) == (False, "NotServing")
    assert found["Available"].message == (
        "3 of 3 members healthy with leader demo-0, but 0 serving linearizable reads, 2 needed: "
        "demo-0, demo-1, demo-2: a linearizable read failed: timed out")


@pytest.mark.parametrize(("serving", "available"), [(3, True), (2, True), (1, False), (0, False)])
def test_available_needs_a_quorum_of_voters_serving_linearizable_reads(serving: int, available: bool) -> None:
    unready = {o: {"ready": False} for o in range(serving, 3)}
    found = by_type(conditions(cluster(), STEADY3, members(range(3), 0, unready), NOW, None))
    assert (found["Available"].status, found["Available"].reason) == \
        (available, "QuorumHealthy" if available else "NotServing")


def test_a_ready_record_counts_only_where_it_is_a_healthy_voter() -> None:
    """A learner, or a member whose Status sees no leader, serves nobody whatever its last read said."""
    records = members(range(3), 0, {1: {"role": LEARNER, "ready": True}, 2: {"healthy": False, "ready": True}})
    assert by_type(conditions(cluster(), STEADY3, records, NOW, None))["Available"].reason == "QuorumLost"


def test_not_serving_names_each_reason_once_with_its_members() -> None:
    records = members(range(3), 0, {0: {"ready": False}, 1: {"ready": False}})
    records[0] = replace(records[0], ready_reason="a linearizable read failed: refused")
    found = by_type(conditions(cluster(), STEADY3, records, NOW, None))["Available"]
    assert found.message.endswith(
        "1 serving linearizable reads, 2 needed: demo-0: a linearizable read failed: refused; "
        "demo-1: a linearizable read failed: timed out"), found.message


def test_learners_do_not_count_towards_quorum() -> None:
    records = members(range(3), 0, {1: {"role": LEARNER}, 2: {"role": LEARNER}})
    assert by_type(conditions(cluster(), STEADY3, records, NOW, None))["Available"].reason == "QuorumLost"


def test_members_outside_the_kept_ordinals_do_not_count() -> None:
    plan = Plan(2, (1,), "steady", "2 members as desired")  # kept: 0, 2
    records = members([0, 1], leader=0)
    found = by_type(conditions(cluster(), plan, records, NOW, None))
    assert (found["Available"].status, found["Available"].reason) == (False, "QuorumLost")


@pytest.mark.parametrize("action", sorted(planner.STEP_REASONS))
def test_a_step_is_progressing_with_its_reason(action: str) -> None:
    plan = Plan(3, (), action, f"doing {action}")
    found = by_type(conditions(cluster(), plan, members(range(3), 0), NOW, None))
    assert found["Progressing"] == Condition("Progressing", True, planner.STEP_REASONS[action], f"doing {action}")


def test_scaling_in_the_leader_without_hand_off_says_so_in_progressing() -> None:
    """The engine's Capabilities.hand_off False (Xline): the user reads that an election follows."""
    records = members(range(3), leader=2)
    step = planner.plan("demo", STATEFULSET, 2, (3, []), records, raft(raft_member(o) for o in range(3)), NOW,
                        hand_off=False)
    found = by_type(conditions(cluster(), step, records, NOW, None))
    assert found["Progressing"].reason == "ScalingIn"
    assert "demo-2" in found["Progressing"].message
    assert "leaves without a hand-off: an election follows" in found["Progressing"].message


def test_a_waiting_plan_is_progressing_with_its_message() -> None:
    plan = Plan(3, (), "wait", "waiting for a leader before removing a member")
    found = by_type(conditions(cluster(), plan, members(range(3), 0), NOW, None))
    assert found["Progressing"] == Condition("Progressing", True, "Waiting", plan.message)


def test_a_steady_plan_with_unsettled_membership_is_still_progressing() -> None:
    records = members(range(3), 0, {2: {"role": LEARNER}})
    found = by_type(conditions(cluster(), STEADY3, records, NOW, None))
    assert found["Progressing"] == Condition("Progressing", True, "Waiting",
                                             "waiting for learner demo-2 to be promoted")


def test_a_refused_step_is_degraded_with_the_plans_message() -> None:
    plan = Plan(3, (), "wait", "removing ordinal 2 now would leave fewer than 2 healthy voters",
                refused=True)
    found = by_type(conditions(cluster(), plan, members(range(3), 0), NOW, None))
    assert found["Degraded"] == Condition("Degraded", True, "ScaleRefused", plan.message)


def test_a_problem_wins_over_a_refusal() -> None:
    plan = Plan(3, (), "wait", "refused", refused=True)
    found = by_type(conditions(cluster(), plan, members(range(3), 0), NOW, ("ApplyFailed", "denied")))
    assert found["Degraded"] == Condition("Degraded", True, "ApplyFailed", "denied")


@pytest.mark.parametrize(("down_for", "degraded"), [
    (0, False), (UNAVAILABLE_GRACE_SECONDS - 1, False),
    (UNAVAILABLE_GRACE_SECONDS, True), (10 * UNAVAILABLE_GRACE_SECONDS, True),
])
def test_unavailable_becomes_degraded_only_after_the_grace(down_for: int, degraded: bool) -> None:
    since = NOW - timedelta(seconds=down_for)
    found = by_type(conditions(cluster(), STEADY3, members(range(3), None), NOW, None, since))
    assert found["Degraded"].status is degraded
    if degraded:
        assert (found["Degraded"].reason, found["Degraded"].message) == ("NoLeader", "no member reports itself leader")


def test_a_starting_cluster_is_not_degraded_without_a_recorded_outage() -> None:
    found = by_type(conditions(cluster(), Plan(3, (), "create", "creating 3 members"), [], NOW, None))
    assert found["Available"].status is False and found["Degraded"].status is False


# --- merge_conditions ---------------------------------------------------------------

def test_merged_conditions_are_metav1_conditions() -> None:
    merged = merge_conditions([], [Condition("Available", True, "QuorumHealthy", "ok")], 7, NOW)
    assert merged == [{"type": "Available", "status": "True", "reason": "QuorumHealthy", "message": "ok",
                       "observedGeneration": 7, "lastTransitionTime": "2026-01-01T12:00:00Z"}]


def test_the_transition_time_moves_only_when_the_status_flips() -> None:
    old = [{"type": "Available", "status": "True", "reason": "QuorumHealthy", "message": "a",
            "lastTransitionTime": "2025-12-31T00:00:00Z"}]
    same = merge_conditions(old, [Condition("Available", True, "QuorumHealthy", "b")], 5, NOW)
    assert same[0]["lastTransitionTime"] == "2025-12-31T00:00:00Z" and same[0]["message"] == "b"
    flipped = merge_conditions(old, [Condition("Available", False, "NoLeader", "c")], 5, NOW)
    assert flipped[0]["lastTransitionTime"] == "2026-01-01T12:00:00Z"


def test_a_condition_no_longer_computed_is_dropped() -> None:
    old = [{"type": "Encrypted", "status": "True", "lastTransitionTime": "2025-12-31T00:00:00Z"}]
    merged = merge_conditions(old, [Condition("Degraded", True, "InvalidSpec", "x")], 1, NOW)
    assert [c["type"] for c in merged] == ["Degraded"]


# --- status -------------------------------------------------------------------------

def advanced_workload(replicas: int, reserved: list[int], ready: int) -> dict[str, Any]:
    return {"apiVersion": ADVANCED_STATEFULSET.api_version, "kind": ADVANCED_STATEFULSET.kind,
            "spec": {"replicas": replicas, "reserveOrdinals": reserved},
            "status": {"replicas": replicas, "readyReplicas": ready}}


def test_the_published_status_of_a_running_cluster() -> None:
    c = cluster(workload_kind="AdvancedStatefulSet")
    plan = Plan(3, (2,), "steady", "3 members as desired")
    records = members([0, 1, 3], leader=3)
    out = status(c, plan, advanced_workload(3, [2], 2), records, {}, 4, NOW)
    assert out["observedGeneration"] == 4
    assert set(out["selector"].split(",")) == {f"{k}={v}" for k, v in contract.selector_labels("demo").items()}
    assert (out["workloadKind"], out["replicas"], out["readyReplicas"]) == ("AdvancedStatefulSet", 3, 2)
    assert out["reservedOrdinals"] == [2]
    assert out["leader"] == "demo-3"
    assert [m["name"] for m in out["members"]] == ["demo-0", "demo-1", "demo-3"]
    # Without a published Raft membership the rows are the heartbeats', and nothing is said about Raft.
    assert out["members"][2] == {"name": "demo-3", "id": f"{4:016x}", "role": LEADER, "learner": False,
                                 "healthy": True, "ready": True, "lastHeartbeat": "2026-01-01T12:00:00Z"}
    assert out["disagreements"] == []
    assert [c["type"] for c in out["conditions"]] == ["Available", "Progressing", "Degraded", "Encrypted",
                                                      "OddReplicas"]


def test_stale_records_are_not_published_as_members() -> None:
    records = [member(0, LEADER), member(1, FOLLOWER), member(2, FOLLOWER, age=45)]
    out = status(cluster(), STEADY3, None, records, {}, 1, NOW)
    assert [m["name"] for m in out["members"]] == ["demo-0", "demo-1"]


def test_before_the_workload_reports_the_plan_sizes_the_status() -> None:
    out = status(cluster(), Plan(3, (), "create", "creating 3 members"), None, [], {}, 1, NOW)
    assert (out["replicas"], out["readyReplicas"], out["leader"], out["members"]) == (3, 0, "", [])


def test_an_invalid_spec_publishes_conditions_only() -> None:
    out = status(None, None, None, [], {}, 2, NOW, ("InvalidSpec", "bad"))
    assert set(out) == {"observedGeneration", "conditions", "leader", "members", "disagreements", "replacements"}
    assert out["leader"] == "" and out["members"] == []


def test_an_outage_recorded_in_the_old_status_turns_degraded_after_the_grace() -> None:
    down_since = NOW - timedelta(seconds=UNAVAILABLE_GRACE_SECONDS + 5)
    old = {"conditions": [{"type": "Available", "status": "False", "reason": "NoLeader",
                           "lastTransitionTime": down_since.strftime("%Y-%m-%dT%H:%M:%SZ")}]}
    out = status(cluster(), STEADY3, None, members(range(3), None), old, 1, NOW)
    degraded = next(c for c in out["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "NoLeader")
    available = next(c for c in out["conditions"] if c["type"] == "Available")
    assert available["lastTransitionTime"] == old["conditions"][0]["lastTransitionTime"]


def test_the_builtin_backend_publishes_no_reserved_ordinals() -> None:
    plan = planner.plan("demo", STATEFULSET, 3, (3, []), members(range(3), 0), None, NOW)
    out = status(cluster(), plan, None, members(range(3), 0), {}, 1, NOW)
    assert out["reservedOrdinals"] == [] and out["workloadKind"] == "StatefulSet"


# --- the plaintext warning is announced once ----------------------------------------

def encrypted(value: str | None) -> dict[str, Any]:
    if value is None:
        return {"conditions": []}
    return {"conditions": [{"type": "Encrypted", "status": value, "reason": "TLSDisabled", "message": "m"}]}


def test_plaintext_is_warned_when_the_condition_first_turns_false() -> None:
    assert announcements(encrypted(None), encrypted("False")) == [("Warning", "TLSDisabled", "m")]
    assert announcements(encrypted("True"), encrypted("False")) == [("Warning", "TLSDisabled", "m")]


def test_plaintext_is_not_warned_again_on_every_reconcile_or_restart() -> None:
    assert announcements(encrypted("False"), encrypted("False")) == []
    assert announcements(encrypted("True"), encrypted("True")) == []
    assert announcements(encrypted(None), encrypted("True")) == []


@pytest.mark.parametrize(("value", "expected"), [("True", True), ("False", False), (None, False)])
def test_degraded_reads_the_condition(value: str | None, expected: bool) -> None:
    st = {"conditions": [{"type": "Degraded", "status": value}]} if value else {}
    assert degraded(st) is expected


def test_a_degraded_cluster_is_resynced_at_the_retry_period() -> None:
    settings = OperatorSettings(resync_seconds=600, retry_seconds=60)
    assert (settings.resync_period(True), settings.resync_period(False)) == (60, 600)


@pytest.mark.parametrize(("stepping", "forced", "degraded", "since", "due"), [
    (False, False, False, 10.0, False),
    (True, False, False, 10.0, True),
    (False, True, False, 10.0, True),
    (False, False, False, 600.0, True),
    (False, False, True, 59.0, False),
    (False, False, True, 60.0, True),
])
def test_a_quiet_tick_writes_only_when_the_resync_is_due(stepping: bool, forced: bool, degraded: bool,
                                                          since: float, due: bool) -> None:
    settings = OperatorSettings(resync_seconds=600, retry_seconds=60)
    assert settings.write_due(stepping=stepping, forced=forced, degraded=degraded, since_applied=since) is due


# --- Raft membership in the status ---------------------------------------------------------

def test_a_stuck_step_is_degraded_with_its_reason_and_announced_once() -> None:
    plan = Plan(3, (), "wait", "waiting for demo-3 (member 4) to leave Raft: not confirmed 130 s after ...",
                stuck="LeaveStuck")
    found = by_type(conditions(cluster(), plan, members(range(3), 0), NOW, None))
    assert found["Degraded"] == Condition("Degraded", True, "LeaveStuck", plan.message)
    assert found["Progressing"] == Condition("Progressing", True, "Waiting", plan.message)
    before = status(cluster(), Plan(3, (), "wait", "waiting"), None, members(range(3), 0), {}, 1, NOW)
    after = status(cluster(), plan, None, members(range(3), 0), before, 1, NOW)
    assert announcements(before, after) == [("Warning", "LeaveStuck", plan.message)]
    assert announcements(after, status(cluster(), plan, None, members(range(3), 0), after, 1, NOW)) == []


def test_a_problem_wins_over_a_stuck_step() -> None:
    plan = Plan(3, (), "wait", "stuck", stuck="JoinStuck")
    found = by_type(conditions(cluster(), plan, members(range(3), 0), NOW, ("ApplyFailed", "denied")))
    assert found["Degraded"].reason == "ApplyFailed"


def test_members_join_raft_with_heartbeats() -> None:
    records = members(range(3), 1, {2: {"healthy": False}})
    membership = raft([raft_member(0, index=90), raft_member(1, index=100), raft_member(2, index=None),
                       raft_member(3, learner=True, index=40)], 1)
    out = status(cluster(), STEADY3, None, records, {}, 1, NOW, raft=membership)
    assert out["members"] == [
        {"name": "demo-0", "id": f"{1:016x}", "role": FOLLOWER, "learner": False, "inRaft": True, "healthy": True,
         "ready": True, "indexLag": 10, "lastHeartbeat": "2026-01-01T12:00:00Z"},
        {"name": "demo-1", "id": f"{2:016x}", "role": LEADER, "learner": False, "inRaft": True, "healthy": True,
         "ready": True, "indexLag": 0, "lastHeartbeat": "2026-01-01T12:00:00Z"},
        {"name": "demo-2", "id": f"{3:016x}", "role": FOLLOWER, "learner": False, "inRaft": True, "healthy": False,
         "ready": False, "lastHeartbeat": "2026-01-01T12:00:00Z"},  # did not answer the leader: no lag known
        {"name": "demo-3", "id": f"{4:016x}", "role": LEARNER, "learner": True, "inRaft": True, "healthy": False,
         "ready": False, "indexLag": 60},  # in Raft, no heartbeat
    ]
    assert out["disagreements"] == [
        f"member {4:016x} of demo-3 is in Raft, but the workload runs no pod for ordinal 3: "
        "membership-clean removes it after its grace period"]


def test_a_pod_whose_member_left_raft_is_named() -> None:
    # demo-2's sidecar still renews its Lease, but Raft has removed its member.
    out = status(cluster(), STEADY3, None, members(range(3), 0), {}, 1, NOW,
                 raft=raft([raft_member(0), raft_member(1)], 0))
    assert [(m["name"], m.get("inRaft")) for m in out["members"]] == [
        ("demo-0", True), ("demo-1", True), ("demo-2", False)]
    assert out["disagreements"] == ["demo-2 runs no Raft member",
                                    f"demo-2 reports member {3:016x}, which Raft does not list"]
    found = {c["type"]: c for c in out["conditions"]}
    # Its Lease still says healthy follower, but Raft decides who votes: 2 of 3, not 3 of 3.
    assert found["Available"]["message"] == "2 of 3 members healthy, 2 serving linearizable reads, leader demo-0"
    assert (found["Progressing"]["status"], found["Progressing"]["reason"]) == ("True", "Waiting")
    assert found["Progressing"]["message"].startswith(f"waiting for demo-2 (member {3:016x}): its heartbeat names "
                                                      "a member that Raft does not list"), found["Progressing"]


def test_without_a_published_membership_the_heartbeats_say_who_votes() -> None:
    found = by_type(conditions(cluster(), STEADY3, members(range(3), 0), NOW, None, raft=None))
    assert found["Available"].message == "3 of 3 members healthy, 3 serving linearizable reads, leader demo-0"


def test_a_heartbeat_of_a_raft_learner_is_no_voter() -> None:
    # The Lease says follower (written before the sidecar saw itself demoted, or by a stale pod):
    # Raft, which lists the member as a learner, decides.
    membership = raft([raft_member(0), raft_member(1), raft_member(2, learner=True)], 0)
    found = by_type(conditions(cluster(), STEADY3, members(range(3), 0), NOW, None, raft=membership))
    assert found["Available"].message == "2 of 3 members healthy, 2 serving linearizable reads, leader demo-0"
    assert found["Progressing"].message == "waiting for ordinal 2 to join and report healthy"


def test_two_raft_entries_of_one_ordinal_keep_unique_names() -> None:
    membership = raft([raft_member(0), raft_member(1), raft_member(2),
                       raft_member(2, member_id="ab", learner=True, started=False)], 0)
    out = status(cluster(), STEADY3, None, members(range(3), 0), {}, 1, NOW, raft=membership)
    names = [m["name"] for m in out["members"]]
    assert len(names) == len(set(names)) == 4 and "demo-2/ab" in names


def test_a_member_under_no_ordinal_is_named_and_left_alone() -> None:
    stranger = replace(raft_member(0), ordinal=None, name="by-hand", id="abc")
    out = status(cluster(), STEADY3, None, members(range(3), 0), {}, 1, NOW,
                 raft=raft([*(raft_member(o) for o in range(3)), stranger], 0))
    assert out["members"][-1]["name"] == "by-hand"
    assert out["disagreements"] == ["member abc (by-hand) is in Raft under a name no pod of this cluster has; "
                                    "it is left alone"]


# --- an even size is warned about, with the quorum arithmetic (issue 14 item 6) ---------------

@pytest.mark.parametrize(("replicas", "odd", "needle"), [
    (1, True, "1 members: every write needs 1, so 0 may fail"),
    (2, False, "every write needs 2 members, so only 0 may fail, as with 1"),
    (3, True, "every write needs 2, so 1 may fail"),
    (4, False, "every write needs 3 members, so only 1 may fail, as with 3"),
    (6, False, "Use 5 or 7"),
])
def test_even_replicas_get_a_warning_condition_with_the_arithmetic(replicas: int, odd: bool, needle: str) -> None:
    """Before: replicas 4 was accepted without a word (issue 14)."""
    found = by_type(conditions(cluster(replicas=replicas), STEADY3, members(range(3), leader=1), NOW, None))
    assert found["OddReplicas"].status is odd and needle in found["OddReplicas"].message
    assert found["OddReplicas"].reason == ("OddReplicas" if odd else "EvenReplicas")


def test_even_replicas_are_announced_once_per_size() -> None:
    def st(replicas: int) -> dict[str, Any]:
        out = status(cluster(replicas=replicas), STEADY3, None, members(range(3), leader=1), {}, 1, NOW)
        return {"conditions": [c for c in out["conditions"] if c["type"] == "OddReplicas"]}

    first = announcements(st(3), st(4))
    assert [(kind, reason) for kind, reason, _ in first] == [("Warning", "EvenReplicas")]
    assert "needs 3 members" in first[0][2]
    assert announcements(st(4), st(4)) == []
    assert [reason for _, reason, _ in announcements(st(4), st(6))] == ["EvenReplicas"]
    assert announcements(st(4), st(5)) == []
# --- replacements -----------------------------------------------------------------------

REPLACING = [{"pod": "demo-1", "phase": "Removing", "message": "removing member a1", "oldMember": "a1"}]
BLOCKED = [{"pod": "demo-1", "phase": "Waiting", "message": "removing member a1 would lose quorum"}]


def test_a_replacement_under_way_is_progressing() -> None:
    found = by_type(conditions(cluster(), STEADY3, members(range(3), 0), NOW, None, replacements=REPLACING))
    assert (found["Progressing"].status, found["Progressing"].reason) == (True, "Replacing")
    assert "demo-1" in found["Progressing"].message and found["Degraded"].status is False


def test_a_replacement_that_would_lose_quorum_is_degraded_and_announced() -> None:
    found = by_type(conditions(cluster(), STEADY3, members(range(3), 0), NOW, None, replacements=BLOCKED))
    assert (found["Degraded"].status, found["Degraded"].reason) == (True, "ReplaceWaiting")
    assert "quorum" in found["Degraded"].message
    new = status(cluster(), STEADY3, None, members(range(3), 0), {}, 1, NOW, replacements=BLOCKED)
    assert new["replacements"] == BLOCKED
    assert ("Warning", "ReplaceWaiting") in [(k, r) for k, r, _ in announcements({}, new)]


def test_a_row_that_goes_away_is_not_told_by_the_status_diff() -> None:
    # The finished record on the pod tells the end, once (replacements.untold); a gone row alone says nothing.
    before = status(cluster(), STEADY3, None, members(range(3), 0), {}, 1, NOW, replacements=REPLACING)
    after = status(cluster(), STEADY3, None, members(range(3), 0), before, 1, NOW)
    assert not [r for _, r, _ in announcements(before, after) if r.startswith("Replace")]


# --- when the status is patched --------------------------------------------------------------

def _running_status(*, healthy: bool = True) -> dict[str, Any]:
    """The status of a 3-member cluster whose members all renewed at NOW."""
    records = members([0, 1, 2], leader=0, overrides={2: {"healthy": healthy}})
    return status(cluster(), Plan(3, (), "steady", "3 members as desired"), None, records, {}, 4, NOW)


def _shown(st: dict[str, Any], seconds_ago: float) -> dict[str, Any]:
    """`st` as patched `seconds_ago` s before NOW: the renewal times it shows are that old."""
    shown = rfc3339(NOW - timedelta(seconds=seconds_ago))
    return {**st, "members": [{**row, "lastHeartbeat": shown} for row in st["members"]]}


def test_an_unchanged_status_is_not_patched() -> None:
    st = _running_status()
    assert not patch_due(st, st, NOW, 60)


def test_renewals_alone_are_patched_only_once_the_shown_renewal_is_old() -> None:
    new = _running_status()
    assert not patch_due(_shown(new, 59), new, NOW, 60)
    assert patch_due(_shown(new, 60), new, NOW, 60)


def test_a_change_besides_renewals_is_patched_at_once() -> None:
    old = _shown(_running_status(), 10)
    assert patch_due(old, _running_status(healthy=False), NOW, 60)
    assert patch_due(old, {**_running_status(), "observedGeneration": 5}, NOW, 60)
    assert patch_due({k: v for k, v in old.items() if k != "leader"}, _running_status(), NOW, 60)


def test_a_renewal_shown_for_the_first_time_is_patched_at_once() -> None:
    new = _running_status()
    old = {**new, "members": [{k: v for k, v in row.items() if k != "lastHeartbeat"} for row in new["members"]]}
    assert patch_due(old, new, NOW, 60)
