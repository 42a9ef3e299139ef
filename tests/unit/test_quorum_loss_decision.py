"""The operator's quorum-loss decision (raftset.operator.pure.quorum_loss): report, start, refuse, finish."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import datetime, timedelta, timezone

import pytest

from raftset import contract
from raftset.membership import RaftMember, RaftMembership
from raftset.operator.pure.heartbeats import HeartbeatRecord
from raftset.operator.pure.objects import Incarnation
from raftset.operator.pure.quorum_loss import (QuorumView, announcements, decide, lost_since, narrated, previous_condition,
                                       restart, survivors, with_record)
from raftset.operator.pure.events import Condition
from raftset.operator.pure.status import merge_conditions
from raftset.quorum_loss import QuorumLossRecord

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def beat(ordinal: int, *, role: str = contract.ROLE_UNKNOWN, healthy: bool = False, term: int = 4,
         committed: int = 100, applied: int | None = None, age: float = 1.0, confirmed: bool = True,
         member_id: str | None = None) -> HeartbeatRecord:
    renewed = NOW - timedelta(seconds=age)
    return HeartbeatRecord(pod=f"demo-{ordinal}", ordinal=ordinal,
                           member_id=f"{ordinal + 10:x}" if member_id is None else member_id, role=role,
                           healthy=healthy, renewed=renewed, observed=renewed, expires=renewed + timedelta(seconds=30),
                           confirmed=confirmed, raft_term=term, raft_index=committed,
                           applied_index=committed if applied is None else applied)


def raft(*ordinals: int, learners: tuple[int, ...] = ()) -> RaftMembership:
    return RaftMembership(leader_id="a", leader="demo-0", term=3, index=90, published="", members=tuple(
        RaftMember(id=f"{o + 10:x}", name=f"demo-{o}", ordinal=o, peer_urls=(f"http://demo-{o}:2380",),
                   learner=o in learners, started=True, raft_index=90, applied_index=90) for o in ordinals))


def view(beats: list[HeartbeatRecord], **changes: object) -> QuorumView:
    base = QuorumView(cluster="demo", kind_short="etcdc", replicas=3, kept=(0, 1, 2), raft=raft(0, 1, 2),
                      heartbeats=beats, request=None, policy="Manual", grace_seconds=60, lost_since=None, record=None,
                      force_supported=True, now=NOW, new_id="r1")
    return dataclasses.replace(base, **changes)


HEALTHY = [beat(0, role=contract.ROLE_LEADER, healthy=True), beat(1, role=contract.ROLE_FOLLOWER, healthy=True),
           beat(2, role=contract.ROLE_FOLLOWER, healthy=True)]
LOST = [beat(1, committed=120, applied=118)]  # ordinals 0 and 2 are gone
RECORD = QuorumLossRecord(id="r1", survivor="demo-1", member_id="b", started="2026-01-01T11:59:00Z", requested="auto")


def test_a_healthy_cluster_reports_no_loss_and_refuses_a_request_without_changing_anything() -> None:
    assert decide(view(HEALTHY)).condition.status is False
    for request in ("auto", "demo-1"):
        d = decide(view(HEALTHY, request=request))
        assert d.start is None and d.drop_request and d.events[0][1] == "RecoveryRefused"


def test_one_missing_member_of_three_is_not_a_quorum_loss() -> None:
    # No leader for a moment (an election), two members answer: quorum is there.
    two = [beat(0), beat(1)]
    assert decide(view(two)).condition.status is False


def test_the_loss_is_reported_with_every_survivor_and_its_indexes_and_nothing_happens_by_default() -> None:
    d = decide(view(LOST))
    assert d.condition.status is True and d.condition.reason == "QuorumLost"
    assert "demo-1" in d.condition.message and "committed 120" in d.condition.message and "applied 118" in d.condition.message
    assert "raftset.dev/recover-quorum=auto" in d.condition.message
    assert d.start is None and not d.events
    # ... however long it lasts, under the Manual policy.
    assert decide(view(LOST, lost_since=NOW - timedelta(days=1))).start is None


def test_auto_chooses_the_most_up_to_date_survivor_of_five() -> None:
    beats = [beat(3, committed=130, term=4), beat(4, committed=130, term=3)]
    d = decide(view(beats, replicas=5, kept=range(5), raft=raft(*range(5)), request="auto"))
    assert d.start is not None and d.start.survivor == "demo-3" and d.start.member_id == "d"
    assert d.drop_request and not d.events and d.announce is not None
    assert d.announce[1] == "QuorumRecoveryStarted" and "r1" in d.announce[2] and "demo-3" in d.announce[2]
    assert d.condition.reason == "Recovering" and narrated(d.condition, d.start)


def test_a_named_survivor_is_taken_and_a_pod_that_is_no_survivor_is_refused() -> None:
    beats = [beat(0, committed=90), beat(1, committed=130)]
    five = dict(replicas=5, kept=range(5), raft=raft(*range(5)))
    d = decide(view(beats, request="demo-0", **five))
    assert d.start is not None and d.start.survivor == "demo-0"  # the person's choice, even if older
    refused = decide(view(beats, request="demo-4", **five))
    assert refused.start is None and refused.drop_request and refused.events[0][1] == "RecoveryRefused"


def test_automatic_starts_only_after_the_grace_period() -> None:
    auto = dict(policy="Automatic", grace_seconds=60)
    assert decide(view(LOST, lost_since=None, **auto)).start is None  # the loss is only now seen
    assert decide(view(LOST, lost_since=NOW - timedelta(seconds=59), **auto)).start is None
    started = decide(view(LOST, lost_since=NOW - timedelta(seconds=60), **auto)).start
    assert started is not None and started.survivor == "demo-1" and started.requested == "Automatic"


def test_an_engine_without_force_new_cluster_needs_a_backup() -> None:
    stale = [beat(1, age=120)]  # a heartbeat older than its Lease is no survivor: no evidence either way
    assert decide(view(stale)).condition.reason == "MembersUnseen"
    for request in (None, "auto"):
        d = decide(view(LOST, force_supported=False, request=request))
        assert d.condition.reason == "RecoveryUnsupported" and d.start is None
        assert bool(d.events) == bool(request)


def test_learners_and_members_that_do_not_answer_status_are_no_survivors() -> None:
    beats = [beat(0, role=contract.ROLE_LEARNER), beat(1, term=0), beat(2)]
    assert [s.pod for s in survivors(view(beats, raft=raft(0, 1, 2, learners=(0,))))] == ["demo-2"]


def test_one_recovery_at_a_time_reported_step_by_step_until_every_member_votes() -> None:
    d = decide(view([beat(1)], record=RECORD, request="auto"))
    assert d.condition.reason == "Recovering" and d.start is None and d.drop_request
    alone = [beat(1, role=contract.ROLE_LEADER, healthy=True)]
    d = decide(view(alone, record=RECORD, raft=raft(1)))
    assert d.condition.status is False and d.condition.reason == "Rejoining" and not d.finish
    # Heartbeats of three voters, but the published membership is still the old one: not yet.
    done = [beat(0, role=contract.ROLE_FOLLOWER, healthy=True), beat(1, role=contract.ROLE_LEADER, healthy=True),
            beat(2, role=contract.ROLE_FOLLOWER, healthy=True)]
    assert not decide(view(done, record=RECORD, raft=raft(1, 0, learners=(0,)))).finish
    d = decide(view(done, record=RECORD, raft=raft(0, 1, 2)))
    assert d.finish and d.condition.reason == "Recovered" and d.events[-1][1] == "QuorumRecovered"


def test_a_finished_recovery_stays_told_on_the_next_rounds_until_the_quorum_changes() -> None:
    """The round right after the one that finished (woken at once by the record's removal) kept
    'Recovered' only while rounds came 5 s apart: before, QuorumHealthy replaced it in the same second."""
    done = decide(view(HEALTHY, record=RECORD, raft=raft(0, 1, 2))).condition
    after = decide(view(HEALTHY, raft=raft(0, 1, 2), previous=done))
    assert (after.condition, after.events, after.finish) == (done, (), False)
    lost_again = decide(view(LOST, previous=done)).condition
    assert lost_again.status is True and lost_again.reason != "Recovered"


def test_a_recovery_whose_members_all_rejoined_between_two_reconciles_still_tells_writes_restored() -> None:
    recovering = decide(view([beat(1)], record=RECORD, request="auto")).condition
    assert recovering.status is True and recovering.reason == "Recovering"
    d = decide(view(HEALTHY, record=RECORD, previous=recovering, announced=True))
    assert d.finish and [e[1] for e in d.events] == ["QuorumRestored", "QuorumRecovered"]
    assert "recovery r1: demo-0 leads" in d.events[0][2]
    assert not [e for e in announcements({"conditions": [{"type": "QuorumLost", "status": "True",
                                                           "reason": "Recovering"}]}, d.condition)], "told once"
    # Seen Rejoining before: told then (announcements), not again at the end.
    rejoining = decide(view([beat(1, role=contract.ROLE_LEADER, healthy=True)], record=RECORD, raft=raft(1))).condition
    d = decide(view(HEALTHY, record=RECORD, previous=rejoining, announced=True))
    assert [e[1] for e in d.events] == ["QuorumRecovered"]


def test_announcements_once_per_change() -> None:
    lost = decide(view(LOST)).condition
    assert [e[1] for e in announcements({}, lost)] == ["QuorumLost"]
    old = {"conditions": [{"type": "QuorumLost", "status": "True", "reason": "QuorumLost"}]}
    assert announcements(old, lost) == []
    rejoining = decide(view([beat(1, role=contract.ROLE_LEADER, healthy=True)], record=RECORD, raft=raft(1))).condition
    recovering = {"conditions": [{"type": "QuorumLost", "status": "True", "reason": "Recovering"}]}
    assert [e[1] for e in announcements(recovering, rejoining)] == ["QuorumRestored"]


def test_pods_that_started_before_the_record_restart_once() -> None:
    def pod(name: str, created: str, deleting: bool = False) -> dict:
        meta = {"name": name, "uid": f"uid-{name}", "creationTimestamp": created}
        if deleting:
            meta["deletionTimestamp"] = created
        return {"metadata": meta}
    pods = [pod("demo-0", "2026-01-01T11:00:00Z"), pod("demo-1", "2026-01-01T11:59:00Z"),
            pod("demo-2", "2026-01-01T11:59:01Z"), pod("demo-3", "2026-01-01T10:00:00Z", deleting=True)]
    judged = [Incarnation("demo-0", "uid-demo-0"), Incarnation("demo-1", "uid-demo-1")]
    assert restart(pods, RECORD) == judged
    for order in itertools.permutations(pods):
        assert restart(list(order), RECORD) == judged


def test_restart_counts_whole_seconds_and_skips_unreadable_creation_times() -> None:
    pods = [{"metadata": {"name": "demo-0", "uid": "u0", "creationTimestamp": "2026-01-01T11:59:00.5Z"}},
            {"metadata": {"name": "demo-1", "uid": "u1", "creationTimestamp": "yesterday"}},
            {"metadata": {"name": "demo-2", "uid": "u2"}},
            {"metadata": {"name": "demo-3", "creationTimestamp": "2026-01-01T11:00:00Z"}}]  # no UID: not judged
    assert restart(pods, RECORD) == [Incarnation("demo-0", "u0")]


@pytest.mark.parametrize("started", ["", "zzz", "soon"])
def test_a_record_with_an_unreadable_start_restarts_nothing(started: str) -> None:
    """String comparison used to restart every pod on every reconcile for a start like 'zzz'."""
    pods = [{"metadata": {"name": "demo-0", "creationTimestamp": "2026-01-01T11:00:00Z"}}]
    assert restart(pods, dataclasses.replace(RECORD, started=started)) == []


def _previous(status: str, reason: str, since: str | None = "2026-01-01T11:00:00Z") -> dict:
    cond = {"type": "QuorumLost", "status": status, "reason": reason}
    if since is not None:
        cond["lastTransitionTime"] = since
    return {"conditions": [{"type": "Available", "status": "False", "lastTransitionTime": "2026-01-01T10:00:00Z"},
                           cond]}


def test_the_loss_counts_from_when_quorum_lost_turned_true() -> None:
    assert lost_since(_previous("True", "QuorumLost")) == datetime(2026, 1, 1, 11, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("previous", [
    {}, {"conditions": []}, _previous("False", "QuorumHealthy"), _previous("True", "NoSurvivor"),
    _previous("True", "QuorumLost", since=None), _previous("True", "QuorumLost", since="a while ago"),
])
def test_no_loss_time_unless_quorum_lost_is_true_and_readable(previous: dict) -> None:
    assert lost_since(previous) is None


# --- an operator restarted mid-way (issue 12): what the API says, nothing remembered

REJOINING = Condition("QuorumLost", False, "Rejoining", "recovery r1: demo-1 leads and accepts writes; 1 of 3 ...")
LOST_SHOWN = Condition("QuorumLost", True, "QuorumLost", "1 of 3 voting members answer, 2 needed. Survivors: ...")


def test_heartbeats_not_yet_seen_renewed_neither_lead_nor_survive_and_the_verdict_waits() -> None:
    """After a restart every Lease is first seen once: the dead leader's last words looked like a
    leader (a request was refused: 'the cluster has quorum'), a dead member's like a survivor."""
    dead_leader = beat(0, role=contract.ROLE_LEADER, healthy=True, confirmed=False)
    dead_ahead = beat(2, committed=500, confirmed=False)  # its last heartbeat says it was further ahead
    beats = [dead_leader, beat(1, committed=120), dead_ahead]
    assert [s.pod for s in survivors(view(beats))] == ["demo-1"]
    d = decide(view(beats, request="auto", previous=LOST_SHOWN))
    assert d.condition == LOST_SHOWN and d.start is None and not d.drop_request and not d.events
    assert announcements({"conditions": [{"type": "QuorumLost", "status": "True", "reason": "QuorumLost"}]},
                         d.condition) == []
    # Auto-policy past its grace waits the same; once the dead records expire, the one survivor is chosen.
    auto = dict(policy="Automatic", lost_since=NOW - timedelta(hours=1))
    assert decide(view(beats, previous=LOST_SHOWN, **auto)).start is None
    later = decide(view([beat(1, committed=120)], request="auto", previous=LOST_SHOWN))
    assert later.start is not None and later.start.survivor == "demo-1"
    # A healthy cluster seen first after a restart: no verdict flips, no refusal yet.
    first_sight = [dataclasses.replace(b, confirmed=False) for b in HEALTHY]
    healthy_shown = Condition("QuorumLost", False, "QuorumHealthy", "leader demo-0")
    d = decide(view(first_sight, request="auto", previous=healthy_shown))
    assert d.condition == healthy_shown and not d.drop_request and not d.events


def test_a_voter_whose_store_does_not_answer_makes_auto_wait_and_says_so() -> None:
    """It holds data that cannot be ranked: choosing among the others could drop what only it has."""
    quiet = beat(2, term=0, committed=0)
    beats = [beat(1, committed=120), quiet]
    five = dict(replicas=5, kept=range(5), raft=raft(*range(5)))
    d = decide(view(beats, request="auto", **five))
    assert d.condition.status and d.condition.reason == "SurvivorsNotAnswering"
    assert "demo-2 (member c)" in d.condition.message and "=<pod>" in d.condition.message
    assert d.start is None and not d.drop_request and not d.events
    assert decide(view(beats, policy="Automatic", lost_since=NOW - timedelta(hours=1), **five)).start is None
    named = decide(view(beats, request="demo-1", **five))  # a person may go ahead without it
    assert named.start is not None and named.start.survivor == "demo-1"
    waits = decide(view(beats, request="demo-2", **five))  # named, but it cannot start yet: kept
    assert waits.start is None and not waits.drop_request and waits.condition.reason == "SurvivorsNotAnswering"
    # The only voter with data does not answer: it may answer soon.
    assert decide(view([quiet])).condition.reason == "SurvivorsNotAnswering"
    # A pod on an empty volume (no member id) holds nothing: it is neither survivor nor silent.
    empty = beat(2, term=0, member_id="")
    assert decide(view([empty])).condition.reason == "MembersUnseen"
    assert [e[1] for e in announcements({}, d.condition)] == ["SurvivorsNotAnswering"]


def test_the_running_recoverys_own_request_left_behind_by_a_killed_operator_is_dropped_quietly() -> None:
    for record, request in ((RECORD, "auto"), (RECORD, "demo-1"),
                            (dataclasses.replace(RECORD, requested="Automatic"), "auto"),
                            (dataclasses.replace(RECORD, requested="demo-1"), "demo-1")):
        d = decide(view([beat(1)], record=record, request=request, announced=True))
        assert d.drop_request and not d.events and d.start is None, (record, request)
    other = decide(view([beat(1)], record=RECORD, request="demo-2", announced=True))
    assert other.drop_request and [e[1] for e in other.events] == ["RecoveryRefused"]
    assert "still running" in other.events[0][2]


def test_a_recovery_whose_start_was_never_told_is_told_once_by_the_next_operator() -> None:
    d = decide(view([beat(1)], record=RECORD, previous=LOST_SHOWN, announced=False))
    assert d.announce is not None and d.announce[1] == "QuorumRecoveryStarted"
    assert "recovery r1 (auto): demo-1 (member b)" in d.announce[2]
    assert d.condition.reason == "Recovering" and narrated(d.condition, RECORD)
    assert decide(view([beat(1)], record=RECORD, previous=d.condition, announced=True)).announce is None
    assert not narrated(LOST_SHOWN, RECORD) and narrated(REJOINING, RECORD)
    assert not narrated(dataclasses.replace(REJOINING, message="recovery r2: ..."), RECORD)


def test_a_restarted_operator_keeps_the_recoverys_step_until_it_sees_heartbeats_renewed() -> None:
    """Else Rejoining -> Recovering -> Rejoining after a restart: a second QuorumRestored Event."""
    first_sight = [beat(1, role=contract.ROLE_LEADER, healthy=True, confirmed=False)]
    d = decide(view(first_sight, record=RECORD, raft=raft(1), previous=REJOINING, announced=True))
    assert d.condition == REJOINING and not d.finish and d.announce is None
    # Stale records of three healthy voters and the old three-voter membership never end it.
    stale = [dataclasses.replace(b, confirmed=False) for b in HEALTHY]
    d = decide(view(stale, record=RECORD, previous=REJOINING, announced=True))
    assert not d.finish and d.condition == REJOINING
    # Seen renewed: the same step again, then done.
    d = decide(view([dataclasses.replace(b, confirmed=True) for b in first_sight], record=RECORD, raft=raft(1),
                    previous=REJOINING, announced=True))
    assert d.condition.reason == "Rejoining" and not d.finish
    assert decide(view(HEALTHY, record=RECORD, previous=REJOINING, announced=True)).finish


def test_the_shown_condition_is_read_back_from_the_status() -> None:
    assert previous_condition({}) is None
    assert previous_condition({"conditions": [{"type": "Available", "status": "True"}]}) is None
    old = {"conditions": [{"type": "QuorumLost", "status": "False", "reason": "Rejoining", "message": "m"}]}
    assert previous_condition(old) == Condition("QuorumLost", False, "Rejoining", "m")
    assert lost_since(_previous("True", "SurvivorsNotAnswering")) == datetime(2026, 1, 1, 11, 0, tzinfo=timezone.utc)


def test_a_cluster_that_never_published_a_membership_is_forming_not_lost() -> None:
    """A new cluster's first reconciles posted a NoSurvivor Warning: 'restore a backup'."""
    d = decide(view([], raft=None))
    assert d.condition.status is False and d.condition.reason == "Forming" and not d.events
    assert announcements({}, d.condition) == []
    refused = decide(view([], raft=None, request="auto"))
    assert refused.drop_request and refused.events[0][1] == "RecoveryRefused" and refused.start is None


# --- issue 30, bug 1: stale Leases are no evidence that Raft lost quorum

AUTOMATIC_PAST_GRACE = dict(policy="Automatic", grace_seconds=10, lost_since=NOW - timedelta(minutes=5))


def test_a_follower_that_sees_a_leader_is_evidence_of_quorum_even_when_the_leaders_lease_is_stale() -> None:
    """The live reproduction: the leader's and one follower's sidecars cannot write their Leases while
    Raft keeps committing; only the third member's record is fresh, and it reports a leader."""
    beats = [beat(0, role=contract.ROLE_LEADER, healthy=True, age=120),
             beat(1, role=contract.ROLE_FOLLOWER, healthy=True, age=120),
             beat(2, role=contract.ROLE_FOLLOWER, healthy=True)]
    for changes in ({}, AUTOMATIC_PAST_GRACE, dict(request="auto"), dict(request="demo-2")):
        d = decide(view(beats, **changes))
        assert d.start is None, changes
        assert (d.condition.status, d.condition.reason) == (False, "QuorumHealthy"), (changes, d.condition)
        assert "demo-2" in d.condition.message and "leader" in d.condition.message, d.condition
    # A request is refused as on any healthy cluster, naming the evidence.
    refused = decide(view(beats, request="auto"))
    assert refused.drop_request and refused.events[0][1] == "RecoveryRefused" and "demo-2" in refused.events[0][2]
    # A learner's record is no voter's evidence; an unconfirmed one (first seen) is no evidence at all.
    assert decide(view([*beats[:2], beat(2, role=contract.ROLE_FOLLOWER, healthy=True, confirmed=False)],
                       **AUTOMATIC_PAST_GRACE)).start is None


def test_no_fresh_record_of_any_voter_claims_nothing_about_quorum() -> None:
    """Every Lease stale says the sidecars cannot write to the API (or the pods are down), not that
    Raft lost quorum: the condition is Unknown, tells no one to restore a backup, and starts nothing."""
    stale = [dataclasses.replace(b, expires=NOW - timedelta(seconds=1)) for b in HEALTHY]
    empty_volume = beat(2, term=0, member_id="")  # a fresh sidecar on an empty volume holds no member
    for beats in ([], stale, [empty_volume]):
        for changes in ({}, AUTOMATIC_PAST_GRACE):
            d = decide(view(beats, **changes))
            assert d.start is None and d.condition.status is None, (beats, changes, d.condition)
            assert d.condition.reason == "MembersUnseen" and "backup" not in d.condition.message, d.condition
        refused = decide(view(beats, request="auto"))
        assert refused.start is None and refused.drop_request and refused.events[0][1] == "RecoveryRefused"
    # Told once, as a Warning; and the grace of Automatic does not count through it.
    unseen = decide(view([])).condition
    assert [e[1] for e in announcements({}, unseen)] == ["MembersUnseen"]
    assert announcements({"conditions": [{"type": "QuorumLost", "status": "Unknown", "reason": "MembersUnseen"}]},
                         unseen) == []
    assert lost_since(_previous("Unknown", "MembersUnseen")) is None
    assert previous_condition({"conditions": [{"type": "QuorumLost", "status": "Unknown", "reason": "MembersUnseen",
                                               "message": "m"}]}) == Condition("QuorumLost", None, "MembersUnseen", "m")


def test_a_real_loss_is_still_seen_and_automatic_still_starts_after_the_grace() -> None:
    """Fresh survivors that answer Status without a leader: the Raft evidence of a loss."""
    beats = [beat(0, age=120, role=contract.ROLE_LEADER, healthy=True), beat(1, committed=120), beat(2, age=120)]
    d = decide(view(beats))
    assert (d.condition.status, d.condition.reason) == (True, "QuorumLost")
    assert decide(view(beats, policy="Automatic", grace_seconds=10, lost_since=NOW - timedelta(seconds=9))).start \
        is None
    started = decide(view(beats, **AUTOMATIC_PAST_GRACE)).start
    assert started is not None and started.survivor == "demo-1" and started.term == 4


def test_a_leader_seen_in_between_resets_the_grace_of_automatic() -> None:
    """The grace counts from when QuorumLost last turned True: a round that sees a leader turns it
    False, so the next loss starts the count again (status.merge_conditions moves lastTransitionTime)."""
    auto = dict(policy="Automatic", grace_seconds=10)
    first = decide(view(LOST, **auto)).condition
    lost_at = NOW - timedelta(seconds=30)
    shown = merge_conditions([], [first], 1, lost_at)
    assert lost_since({"conditions": shown}) == lost_at
    sees = [beat(1, role=contract.ROLE_FOLLOWER, healthy=True)]
    healthy = decide(view(sees, lost_since=lost_since({"conditions": shown}), **auto))
    assert healthy.start is None and healthy.condition.status is False
    shown = merge_conditions(shown, [healthy.condition], 1, NOW - timedelta(seconds=5))
    again = decide(view(LOST, lost_since=lost_since({"conditions": shown}), **auto))
    assert again.start is None and again.condition.reason == "QuorumLost"
    shown = merge_conditions(shown, [again.condition], 1, NOW - timedelta(seconds=2))
    assert lost_since({"conditions": shown}) == NOW - timedelta(seconds=2)
    assert decide(view(LOST, lost_since=lost_since({"conditions": shown}), **auto)).start is None
    # The same with the operator unable to see any heartbeat in between (Unknown): no count through it.
    blind = decide(view([], **auto)).condition
    shown = merge_conditions(merge_conditions([], [first], 1, lost_at), [blind], 1, NOW - timedelta(seconds=5))
    assert lost_since({"conditions": shown}) is None
    shown = merge_conditions(shown, [again.condition], 1, NOW - timedelta(seconds=2))
    assert decide(view(LOST, lost_since=lost_since({"conditions": shown}), **auto)).start is None


def test_unknown_is_written_as_unknown() -> None:
    merged = merge_conditions([], [Condition("QuorumLost", None, "MembersUnseen", "m")], 1, NOW)
    assert merged[0]["status"] == "Unknown"


def test_a_view_with_a_record_is_announced_only_when_the_status_already_tells_that_recovery() -> None:
    """The start reads the workload again and may find a recovery there: its view is built by the same rule
    as the round's own, so a recovery the status tells is not announced twice, and one it does not is."""
    telling = Condition("QuorumLost", True, "Recovering", "recovery r1: demo-1 leads alone")
    other = QuorumLossRecord(id="r2", survivor="demo-1", member_id="b", started="2026-01-01T11:59:30Z",
                             requested="auto")
    assert with_record(view(LOST, previous=telling), RECORD).announced
    assert not with_record(view(LOST, previous=telling), other).announced, "another recovery is news"
    assert not with_record(view(LOST), RECORD).announced, "nothing shown yet"
    assert not with_record(view(LOST, previous=telling, announced=True), None).announced, "no record, nothing told"
    assert with_record(view(LOST), other).record == other
    d = decide(with_record(view(LOST, previous=telling), RECORD))
    assert d.start is None and d.announce is None, d
