"""Quorum arithmetic shared by leave and clean: never remove a member if that loses quorum."""

from __future__ import annotations

from collections.abc import Set

from raftset.contract import quorum


def has_quorum(voters: Set[int], healthy: Set[int]) -> bool:
    return bool(voters) and len(voters & healthy) >= quorum(len(voters))


def safe_to_remove(voters: Set[int], healthy: Set[int], target: int) -> bool:
    """Whether the cluster keeps a healthy quorum once `target` is gone.

    `voters` are the voting members now, `healthy` the members that answered. A learner
    target is not in `voters`; removing it only needs the voters to have quorum.
    """
    remaining = voters - {target}
    return has_quorum(frozenset(remaining), healthy)
