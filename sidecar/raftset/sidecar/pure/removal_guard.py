"""The removal guard shared by clean, join, replace and leave: never remove a member if that loses quorum."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from raftset.contract import quorum
from raftset.sidecar.pure.etcd import Member, Status


def has_quorum(voters: Set[int], healthy: Set[int]) -> bool:
    return bool(voters) and len(voters & healthy) >= quorum(len(voters))


def safe_to_remove(voters: Set[int], healthy: Set[int], target: int) -> bool:
    """Whether the cluster keeps a healthy quorum while and after `target` goes.

    `voters` are the voting members now, `healthy` the members that answered. Until its
    removal commits the target is still one of `voters`, and it may stop before that (a
    leave that times out, a member that only answered for a moment): the healthy voters
    other than the target must be a quorum of the voters there are now. That also covers
    the smaller cluster after the removal, whose quorum is no larger. A learner target
    only needs the voters to have quorum.
    """
    return len((voters & healthy) - {target}) >= quorum(len(voters))


def keeps_quorum_once_removed(voters: Set[int], healthy: Set[int], target: int) -> bool:
    """Whether the cluster has a healthy quorum once `target`'s removal has committed.

    Only for a member that stops whatever is decided (a scaled-away pod on its termination
    path): keeping it would leave it a voter that never answers again, which loses at least
    as much as a removal that does not commit in time.
    """
    return has_quorum(frozenset(voters - {target}), healthy)


def _voters_and_healthy(members: Sequence[Member],
                        statuses: Mapping[int, Status | None]) -> tuple[frozenset[int], frozenset[int]]:
    voters = frozenset(m.id for m in members if not m.is_learner)
    return voters, frozenset(i for i, s in statuses.items() if s is not None)


def may_remove(members: Sequence[Member], statuses: Mapping[int, Status | None], target: int) -> bool:
    """`safe_to_remove` over a MemberList and the members' answers (None: did not answer)."""
    return safe_to_remove(*_voters_and_healthy(members, statuses), target)


def may_leave(members: Sequence[Member], statuses: Mapping[int, Status | None], target: int) -> bool:
    """`keeps_quorum_once_removed` over a MemberList and the members' answers: a leaving member's own check."""
    return keeps_quorum_once_removed(*_voters_and_healthy(members, statuses), target)
