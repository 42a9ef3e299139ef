"""Quorum arithmetic shared by leave and clean: never remove a member if that loses quorum."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from raftset.contract import quorum
from raftset.etcdclient import Member, Status


def has_quorum(voters: Set[int], healthy: Set[int]) -> bool:
    return bool(voters) and len(voters & healthy) >= quorum(len(voters))


def safe_to_remove(voters: Set[int], healthy: Set[int], target: int) -> bool:
    """Whether the cluster keeps a healthy quorum once `target` is gone.

    `voters` are the voting members now, `healthy` the members that answered. A learner
    target is not in `voters`; removing it only needs the voters to have quorum.
    """
    remaining = voters - {target}
    return has_quorum(frozenset(remaining), healthy)


def may_remove(members: Sequence[Member], statuses: Mapping[int, Status | None], target: int) -> bool:
    """`safe_to_remove` over a MemberList and the members' answers (None: did not answer)."""
    voters = frozenset(m.id for m in members if not m.is_learner)
    healthy = frozenset(i for i, s in statuses.items() if s is not None)
    return safe_to_remove(voters, healthy, target)
