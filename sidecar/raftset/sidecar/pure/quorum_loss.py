"""Quorum-loss recovery at join time: the pure decision.

The operator's record on the workload (raftset.quorum_loss.QuorumLossRecord) says which pod
survives; this module says what this pod does about it before the normal join
(raftset.sidecar.pure.join) decides. Every step is decided again from the record, the data dir
(its marker says whether the survivor already started alone for this recovery) and the
survivor's MemberList, so a sidecar killed midway resumes:

- the survivor starts alone from its own data, once per recovery, and only if no other member
  it can reach still has a leader at the term the operator recorded or later: a majority that
  still elects a leader is a cluster that commits, and a forced cluster beside it would split
  it (issue 30);
- every other pod waits until the survivor answers MemberList (a one-member cluster has
  quorum), moves aside data whose member the new cluster dropped (kept, never deleted),
  and then joins through the normal steps: a learner, one at a time, promoted when caught up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from raftset import contract
from raftset.quorum_loss import QuorumLossRecord
from raftset.sidecar.pure.etcd import Member, Status
from raftset.sidecar.pure.marker import Marker


class QuorumLossAction(Enum):
    NONE = "none"  # no recovery concerns this pod now: the normal join decides
    FORCE = "force"  # the survivor: start alone from its own data (a one-member cluster)
    WAIT = "wait"  # not yet: the survivor has not started alone, or does not answer
    MOVE_ASIDE = "move-aside"  # our data belongs to a member the new cluster dropped: keep it, start empty
    REFUSE = "refuse"  # this pod cannot do what the record asks; say so, change nothing


@dataclass(frozen=True)
class QuorumLossView:
    name: str  # this pod
    peer_url: str
    record: QuorumLossRecord | None
    has_data: bool
    marker: Marker | None
    force_supported: bool  # the engine can start one member alone (Capabilities.force_new_cluster)
    survivor_members: Sequence[Member] | None  # MemberList from the survivor only; None: no answer
    peers: Sequence[Status]  # the Status of every other pod's member that answered, asked just now


@dataclass(frozen=True)
class QuorumLossDecision:
    action: QuorumLossAction
    reason: str


def _ours(view: QuorumLossView, members: Sequence[Member]) -> bool:
    """Whether our data dir's member is in the survivor's (new) cluster."""
    for m in members:
        if view.marker is not None and f"{m.id:x}" == f"{view.marker.member_id:x}":
            return True
        if view.marker is None and view.peer_url in m.peer_urls:
            return True
    return False


def decide(view: QuorumLossView) -> QuorumLossDecision:
    record = view.record
    if record is None:
        return QuorumLossDecision(QuorumLossAction.NONE, "no quorum-loss recovery under way")
    if record.survivor == view.name:
        return _survivor(view, record)
    if view.survivor_members is None:
        return QuorumLossDecision(QuorumLossAction.WAIT, f"recovery {record.id}: waiting for {record.survivor} to "
                                             "answer MemberList as the restarted cluster")
    if view.has_data and not _ours(view, view.survivor_members):
        return QuorumLossDecision(QuorumLossAction.MOVE_ASIDE, f"recovery {record.id}: our data belongs to a member that "
                                                   f"{record.survivor}'s new cluster no longer has")
    return QuorumLossDecision(QuorumLossAction.NONE, f"recovery {record.id}: joining {record.survivor}'s cluster")


def _survivor(view: QuorumLossView, record: QuorumLossRecord) -> QuorumLossDecision:
    if view.marker is not None and view.marker.recovered == record.id:
        # Started alone already: from now on a restart is an ordinary restart from our data.
        return QuorumLossDecision(QuorumLossAction.NONE, f"recovery {record.id}: already restarted alone; an ordinary restart")
    if not view.force_supported:
        return QuorumLossDecision(QuorumLossAction.REFUSE, f"recovery {record.id}: this engine cannot start one member alone "
                                               "from its data; restore a backup instead")
    if not view.has_data or view.marker is None:
        return QuorumLossDecision(QuorumLossAction.REFUSE, f"recovery {record.id} chose this pod, but its data dir is "
                                               f"{'empty' if not view.has_data else 'without a member marker'}")
    if f"{view.marker.member_id:x}" != record.member_id:
        return QuorumLossDecision(QuorumLossAction.REFUSE, f"recovery {record.id} chose member {record.member_id}, but this "
                                               f"data dir belongs to member {view.marker.member_id:x}")
    leading = next((p for p in view.peers if p.leader != 0 and p.raft_term >= record.term), None)
    if leading is not None:
        return QuorumLossDecision(QuorumLossAction.REFUSE, (
            f"recovery {record.id}: not starting alone: {leading.endpoint} (member {leading.member_id:x}) has leader "
            f"{leading.leader:x} at term {leading.raft_term}, the survivor's was {record.term} when chosen: Raft still "
            f"has a leader; nothing was changed. If the cluster serves, remove the workload's "
            f"{contract.ANNOTATION_QUORUM_RECOVERY} annotation and every pod restarts as usual"))
    return QuorumLossDecision(QuorumLossAction.FORCE, f"recovery {record.id}: starting member {record.member_id} alone "
                                          "from its own data; no other member reached has a leader")
