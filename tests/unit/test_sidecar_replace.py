"""Replace on request, one step at a time, never losing quorum; and when the join is decided again."""

from __future__ import annotations

import pytest

from raftset import contract
from raftset.contract import ReplacePhase as P
from raftset.replace import Progress
from raftset.sidecar.io.etcdclient import Alarm, AlarmKind
from raftset.sidecar.pure import replace
from raftset.sidecar.pure.corruption import CorruptionRecord
from raftset.sidecar.pure.replace import Act, ReplaceView, decide, premise_failed
from tests.unit.sidecar_data import member, mid, status

pytestmark = pytest.mark.unit

NEW = 0x2001


def three(*, learner: int | None = None, new_for: int | None = None):
    out = [member(o) for o in range(3)]
    if new_for is not None:
        out[new_for] = member(new_for, learner=learner == new_for, member_id=NEW)
    return out


def answers(*ordinals: int, leader: int = 0):
    return {mid(o): status(o, leader=leader) for o in ordinals}


def view(*, requested: bool = True, progress: Progress | None = None, own: int | None = mid(1), members=None,
         statuses=None, size: int = 3, leading: bool = False, hand_off: bool = True,
         target: int | None = None, diagnosis: str | None = None, automatic: bool = False,
         doubtful: bool = False, alarms=(), lock_held: bool = False) -> ReplaceView:
    return ReplaceView(requested=requested, progress=progress, own_id=own,
                       members=three() if members is None else members,
                       statuses=answers(0, 1, 2) if statuses is None else statuses,
                       size=size, leading=leading, hand_off=hand_off, target=target,
                       diagnosis=diagnosis, automatic=automatic, doubtful=doubtful, alarms=alarms,
                       lock_held=lock_held)


def rec(phase: str, old: int = mid(1)) -> Progress:
    return Progress(phase, f"{old:x}", "", "")


def test_nothing_asked_nothing_done() -> None:
    assert decide(view(requested=False)).act is Act.NONE


def test_a_healthy_follower_removes_itself() -> None:
    d = decide(view())
    assert (d.act, d.phase) == (Act.REMOVE, P.REMOVING)


def test_a_leader_hands_off_first_where_the_engine_can() -> None:
    d = decide(view(own=mid(0), leading=True, target=mid(2)))
    assert (d.act, d.phase, d.target) == (Act.HAND_OFF, P.HANDING_OFF, mid(2))


def test_a_leader_without_a_successor_waits() -> None:
    d = decide(view(own=mid(0), leading=True, target=None))
    assert (d.act, d.phase) == (Act.RECORD, P.WAITING)


def test_a_leader_on_an_engine_without_hand_off_removes_itself() -> None:
    assert decide(view(own=mid(0), leading=True, hand_off=False)).act is Act.REMOVE


def test_a_request_that_would_lose_quorum_waits() -> None:
    d = decide(view(statuses=answers(0, 1)))  # ordinal 2 does not answer: removing 1 leaves 1 of 2
    assert (d.act, d.phase) == (Act.RECORD, P.WAITING) and "quorum" in d.reason


def test_a_single_member_is_never_replaced() -> None:
    d = decide(view(own=mid(0), members=[member(0)], statuses=answers(0), size=1))
    assert (d.act, d.phase) == (Act.RECORD, P.WAITING) and "quorum" in d.reason


@pytest.mark.parametrize("pending", [member(2, learner=True), member(2, started=False)])
def test_one_membership_change_at_a_time(pending) -> None:
    d = decide(view(members=[member(0), member(1), pending]))
    assert (d.act, d.phase) == (Act.RECORD, P.QUEUED) and "still joining" in d.reason


def test_a_second_replacement_waits_for_the_first_member_to_come_back() -> None:
    # Ordinal 2 was removed and has not been added again yet: 2 voters for 3 ordinals.
    d = decide(view(members=[member(0), member(1)], statuses=answers(0, 1)))
    assert (d.act, d.phase) == (Act.RECORD, P.QUEUED) and "another replacement" in d.reason


def test_after_leaving_the_member_is_rejoining() -> None:
    d = decide(view(progress=rec(P.REMOVING), members=[member(0), member(2)]))
    assert (d.act, d.phase) == (Act.RECORD, P.REJOINING)


def test_the_new_member_as_learner_is_narrated() -> None:
    d = decide(view(progress=rec(P.REJOINING), own=NEW, members=three(learner=1, new_for=1)))
    assert (d.act, d.phase) == (Act.RECORD, P.LEARNER) and f"{NEW:x}" in d.reason


def test_done_once_the_new_member_votes_even_if_the_annotation_is_gone() -> None:
    for wanted in (True, False):
        d = decide(view(requested=wanted, progress=rec(P.LEARNER), own=NEW, members=three(new_for=1)))
        assert (d.act, d.phase) == (Act.FINISH, P.DONE)


def test_a_request_withdrawn_before_leaving_just_clears_the_record() -> None:
    d = decide(view(requested=False, progress=rec(P.WAITING)))
    assert (d.act, d.phase) == (Act.FINISH, P.WITHDRAWN)


def test_the_old_member_still_in_raft_continues_after_a_sidecar_restart() -> None:
    assert decide(view(progress=rec(P.REMOVING))).act is Act.REMOVE


def test_request_and_progress_are_read_from_the_pod() -> None:
    pod = {"metadata": {"annotations": {contract.ANNOTATION_REPLACE: "true",
                                        contract.ANNOTATION_REPLACE_PROGRESS: rec(P.REMOVING).to_json()}}}
    assert replace.requested(pod) and replace.progress(pod) == rec(P.REMOVING)
    with_steps = Progress(P.REJOINING, "a1", "", "", (P.REMOVING, P.REJOINING))
    pod["metadata"]["annotations"][contract.ANNOTATION_REPLACE_PROGRESS] = with_steps.to_json()
    assert replace.progress(pod) == with_steps
    assert not replace.requested({"metadata": {"annotations": {contract.ANNOTATION_REPLACE: "false"}}})
    assert replace.progress({"metadata": {"annotations": {contract.ANNOTATION_REPLACE_PROGRESS: "{bad"}}}) is None
    assert not replace.requested(None) and replace.progress(None) is None


# Fault c: the join's premise (our member is in Raft) is checked again once the store stops.

def test_premise_fails_when_an_authoritative_list_omits_our_stopped_member() -> None:
    reason = premise_failed(mid(1), False, [member(0), member(2)], True)
    assert reason is not None and f"{mid(1):x}" in reason


@pytest.mark.parametrize("own, local, members, linearizable", [
    (mid(1), False, [member(0), member(1)], True),  # still a member: a restart, keep it
    (mid(1), True, [member(0), member(2)], True),  # our store still answers
    (mid(1), False, [member(0), member(2)], False),  # a lagging list says nothing
    (mid(1), False, None, True),  # nobody answered (a whole-cluster restart)
    (None, False, [member(0)], True),  # no member known yet
])
def test_premise_holds_otherwise(own, local, members, linearizable) -> None:
    assert premise_failed(own, local, members, linearizable) is None


# Automatic replacement (spec.repair.policy): diagnosed from kubelet's view of our store.

ETCD_TEXTS = ("failed to open database", "invalid database")


def exited(message: str = "", restarts: int = 1, running: bool = False) -> dict:
    return {"name": "etcd", "restartCount": restarts,
            "state": {"running": {}} if running else {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 2, "message": message}}}


def test_a_corruption_error_in_the_last_exit_is_corrupt_data() -> None:
    store = exited('{"level":"panic","msg":"failed to open database","error":"invalid database"}')
    found = replace.diagnose(store, False, ETCD_TEXTS, 5, 0)
    assert found is not None and "corrupt" in found


def test_a_crash_loop_counts_restarts_since_the_baseline() -> None:
    assert replace.diagnose(exited("oops", restarts=5), False, ETCD_TEXTS, 5, 0) is not None
    assert replace.diagnose(exited("oops", restarts=7), False, ETCD_TEXTS, 5, 3) is None  # 4 since the last join
    assert replace.diagnose(exited("oops", restarts=9, running=True), False, ETCD_TEXTS, 5, 0) is None


def test_a_serving_store_is_never_diagnosed() -> None:
    assert replace.diagnose(exited("invalid database", restarts=50), True, ETCD_TEXTS, 5, 0) is None
    assert replace.diagnose({}, False, ETCD_TEXTS, 5, 0) is None


def test_automatic_policy_replaces_a_diagnosed_member_like_a_request() -> None:
    d = decide(view(requested=False, statuses=answers(0, 2), diagnosis="data corrupt", automatic=True))
    assert (d.act, d.phase) == (Act.REMOVE, P.REMOVING) and d.reason.startswith("data corrupt")


def test_automatic_policy_never_replaces_without_quorum() -> None:
    d = decide(view(requested=False, statuses=answers(0), diagnosis="data corrupt", automatic=True))
    assert (d.act, d.phase) == (Act.RECORD, P.WAITING) and "quorum" in d.reason


def test_manual_policy_reports_and_waits_for_a_person() -> None:
    d = decide(view(requested=False, statuses=answers(0, 2), diagnosis="data corrupt", automatic=False))
    assert (d.act, d.phase) == (Act.RECORD, P.NEEDED) and contract.ANNOTATION_REPLACE in d.reason


def test_a_doubtful_diagnosis_is_reported_even_under_automatic_policy() -> None:
    # A CORRUPT alarm the data does not confirm (raftset.sidecar.pure.corruption): a person decides.
    d = decide(view(requested=False, diagnosis="the CORRUPT alarm names member demo-1, but ...", automatic=True,
                    doubtful=True))
    assert (d.act, d.phase) == (Act.RECORD, P.NEEDED)
    assert "a person decides" in d.reason and contract.ANNOTATION_REPLACE in d.reason


def test_a_doubtful_hash_check_names_no_alarm_to_disarm() -> None:
    # The periodic hash check found the difference, no alarm stands: there is nothing to disarm.
    d = decide(view(requested=False, diagnosis="the hash check finds the data of member demo-1 different, but ...",
                    automatic=True, doubtful=True))
    assert (d.act, d.phase) == (Act.RECORD, P.NEEDED)
    assert "a person decides" in d.reason and "disarm" not in d.reason and "hashkv" in d.reason
    alarmed = decide(view(requested=False, diagnosis="the CORRUPT alarm names member demo-1, but ...",
                          automatic=True, doubtful=True, alarms=[Alarm(mid(1), AlarmKind.CORRUPT)]))
    assert "alarm disarm" in alarmed.reason


def test_a_certain_hash_check_verdict_replaces_under_the_lock_with_writes_flowing() -> None:
    # No CORRUPT alarm: nothing refuses the membership lock, so the replacement is the ordinary one.
    d = decide(view(requested=False, diagnosis="the hash check (no alarm) finds ...", automatic=True))
    assert (d.act, d.phase) == (Act.REMOVE, P.REMOVING) and d.reason.startswith("the hash check")


def test_a_person_may_replace_a_doubtful_member() -> None:
    d = decide(view(requested=True, diagnosis="the CORRUPT alarm names member demo-1, but ...", doubtful=True))
    assert (d.act, d.phase) == (Act.REMOVE, P.REMOVING)


def test_a_corrupt_alarm_naming_another_member_holds_a_replacement() -> None:
    # It refuses the membership lock's writes: waiting says so instead of failing every round.
    d = decide(view(alarms=(Alarm(mid(2), AlarmKind.CORRUPT),)))
    assert (d.act, d.phase) == (Act.RECORD, P.WAITING) and "disarm" in d.reason


def test_the_alarmed_member_goes_without_the_lock_unless_it_was_taken_before() -> None:
    alarmed = (Alarm(mid(1), AlarmKind.CORRUPT),)
    assert decide(view(alarms=alarmed)).act is Act.REMOVE
    d = decide(view(alarms=alarmed, lock_held=True))
    assert (d.act, d.phase) == (Act.RECORD, P.WAITING) and "taken before" in d.reason
    leader = decide(view(own=mid(0), leading=True, target=mid(2), alarms=(Alarm(mid(0), AlarmKind.CORRUPT),)))
    assert leader.act is Act.HAND_OFF


def test_the_pod_carries_the_leaders_corruption_verdict() -> None:
    found = CorruptionRecord("1002", True, "contradicted")
    pod = {"metadata": {"annotations": {contract.ANNOTATION_CORRUPTION: found.to_json()}}}
    assert replace.corruption_verdict(pod) == found
    assert replace.corruption_verdict(None) is None and replace.corruption_verdict({"metadata": {}}) is None


def test_a_report_is_cleared_once_the_member_serves_again() -> None:
    d = decide(view(requested=False, progress=rec(P.NEEDED)))
    assert d.act is Act.FINISH


def test_the_pod_carries_the_store_status_and_the_baseline() -> None:
    pod = {"metadata": {"annotations": {contract.ANNOTATION_RESTART_BASELINE: "4"}},
           "status": {"containerStatuses": [{"name": "sidecar"}, exited(restarts=6)]}}
    assert replace.store_container(pod, "etcd")["restartCount"] == 6
    assert replace.restart_baseline(pod) == 4 and replace.restart_baseline(None) == 0


def test_the_first_record_names_our_member_as_the_old_one() -> None:
    got = replace.next_progress(None, None, P.REMOVING, "removing", mid(1))
    assert got == Progress(P.REMOVING, f"{mid(1):x}", "", "removing", (P.REMOVING,))


def test_the_record_keeps_the_old_member_and_every_step_and_names_the_new_one() -> None:
    removing = replace.next_progress(None, None, P.REMOVING, "removing", mid(1))
    rejoining = replace.next_progress(removing, None, P.REJOINING, "rejoining", None)
    assert rejoining == Progress(P.REJOINING, f"{mid(1):x}", "", "rejoining", (P.REMOVING, P.REJOINING))
    learner = replace.next_progress(rejoining, None, P.LEARNER, "catching up", NEW)
    assert learner == Progress(P.LEARNER, f"{mid(1):x}", f"{NEW:x}", "catching up",
                               (P.REMOVING, P.REJOINING, P.LEARNER))


def test_a_record_the_pod_shows_or_we_wrote_is_not_written_again() -> None:
    waiting = replace.next_progress(None, None, P.WAITING, "no leader answers", mid(1))
    assert waiting is not None
    assert replace.next_progress(waiting, None, P.WAITING, "no leader answers", mid(1)) is None
    assert replace.next_progress(None, waiting, P.WAITING, "no leader answers", mid(1)) is None
    # What we wrote is newer than a pod read that does not show it yet: no step is lost or repeated.
    later = replace.next_progress(None, waiting, P.WAITING, "still no leader", mid(1))
    assert later is not None and later.steps == (P.WAITING,) and later.reason == "still no leader"


def test_under_the_lock_a_leader_that_can_hand_off_is_not_removed() -> None:
    # remove_self decides again with the statuses read under the lock and no target.
    assert decide(view(own=mid(0), leading=True, target=None)).act is not Act.REMOVE
    assert decide(view(own=mid(0), leading=True, target=None, hand_off=False)).act is Act.REMOVE


def test_the_record_keeps_the_first_cause_to_the_end() -> None:
    crash = replace.cause(False, "the store crash-loops: 3 restarts without serving (threshold 3)")
    needed = replace.next_progress(None, None, P.NEEDED, "annotate the pod", mid(1), crash)
    # A person asks later: the record still says what was found first.
    removing = replace.next_progress(needed, None, P.REMOVING, "removing", mid(1), replace.cause(True, None))
    learner = replace.next_progress(removing, None, P.LEARNER, "catching up", NEW)
    assert needed is not None and removing is not None and learner is not None
    assert needed.cause == removing.cause == learner.cause == crash
    assert replace.cause(True, "data corrupt") == replace.REQUESTED_CAUSE and "replace=true" in replace.REQUESTED_CAUSE
    assert replace.cause(False, None) == ""


def test_a_record_that_begins_gets_the_id_it_is_given_and_keeps_it_to_the_end() -> None:
    removing = replace.next_progress(None, None, P.REMOVING, "removing", mid(1), new_id="r1")
    learner = replace.next_progress(removing, None, P.LEARNER, "catching up", NEW, new_id="r2")
    assert removing is not None and learner is not None
    assert removing.id == learner.id == "r1"
    done = replace.advanced(learner, None, P.DONE, "votes", NEW, new_id="r3")
    assert done == Progress(P.DONE, f"{mid(1):x}", f"{NEW:x}", "votes", (P.REMOVING, P.LEARNER, P.DONE), "", "r1")
    assert done.finished and not learner.finished


def test_a_finished_record_on_the_pod_is_no_replacement_under_way() -> None:
    def pod(record: Progress) -> dict:
        return {"metadata": {"annotations": {contract.ANNOTATION_REPLACE_PROGRESS: record.to_json()}}}
    done = Progress(P.DONE, "a1", "b2", "votes", (P.REMOVING, P.DONE), "", "r1")
    withdrawn = Progress(P.WITHDRAWN, "a1", "", "withdrawn", (P.QUEUED, P.WITHDRAWN), "", "r1")
    assert replace.progress(pod(done)) is None and replace.progress(pod(withdrawn)) is None
    learner = Progress(P.LEARNER, "a1", "b2", "catching up", (P.REMOVING, P.LEARNER), "", "r1")
    assert replace.progress(pod(learner)) == learner
    # So the next replacement of the pod begins a record of its own.
    fresh = replace.next_progress(replace.progress(pod(done)), None, P.REMOVING, "removing", 0xb2, new_id="r2")
    assert fresh == Progress(P.REMOVING, "b2", "", "removing", (P.REMOVING,), "", "r2")


def test_a_lost_volume_is_recorded_as_a_replacement_its_member_left_and_the_repair_finishes() -> None:
    record = replace.lost_volume(mid(1), "member x has our peer URL but our data dir is empty", "r1")
    assert (record.phase, record.steps, record.id) == (P.REJOINING, (P.REMOVING, P.REJOINING), "r1")
    assert record.old_member == f"{mid(1):x}" and record.cause.startswith("lost volume: ")
    learner = three(learner=1, new_for=1)
    d = decide(view(requested=False, progress=record, own=NEW, members=learner))
    assert (d.act, d.phase) == (Act.RECORD, P.LEARNER)
    d = decide(view(requested=False, progress=record, own=NEW, members=three(new_for=1)))
    assert (d.act, d.phase) == (Act.FINISH, P.DONE)


def test_a_new_member_promoted_before_the_sidecar_looked_still_has_its_learner_step() -> None:
    rejoining = Progress(P.REJOINING, "a1", "", "rejoining", (P.REMOVING, P.REJOINING), "", "r1")
    done = replace.advanced(rejoining, None, P.DONE, "votes", NEW)
    assert done.steps == (P.REMOVING, P.REJOINING, P.LEARNER, P.DONE)
    learner = replace.advanced(rejoining, None, P.LEARNER, "catching up", NEW)
    assert replace.advanced(learner, None, P.DONE, "votes", NEW).steps == (P.REMOVING, P.REJOINING, P.LEARNER, P.DONE)
    # A request withdrawn before the member left has no new member: nothing added.
    queued = Progress(P.QUEUED, "a1", "", "queued", (P.QUEUED,), "", "r1")
    assert replace.advanced(queued, None, P.WITHDRAWN, "withdrawn", mid(1)).steps == (P.QUEUED, P.WITHDRAWN)
