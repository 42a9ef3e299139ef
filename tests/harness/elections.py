"""Which raft elections happened and why, read from the etcd members' own logs.

A raw term count cannot tell the leader's hand-off (MoveLeader: raft sends the transferee
MsgTimeoutNow) from an election a busy machine called because a heartbeat came late, so a test
that counts terms fails for the machine's reasons. etcd's raft logs both events:
"<id> [term T] received MsgTimeoutNow from <leader> ..." on the transferee, then
"<id> became leader at term T+1" on the winner. A leader that lost its quorum (check-quorum)
logs "<id> stepped down to follower since quorum is not active", then "became follower at term T".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

_WON = re.compile(r"\b([0-9a-f]+) became leader at term (\d+)")
_TRANSFER = re.compile(r"\b([0-9a-f]+) \[term (\d+)\] received MsgTimeoutNow from ([0-9a-f]+)")
_NO_QUORUM = re.compile(r"\b([0-9a-f]+) stepped down to follower since quorum is not active")
_FOLLOWER = re.compile(r"\b([0-9a-f]+) became follower at term (\d+)")


@dataclass(frozen=True)
class Election:
    term: int  # the term the winner leads
    leader: str  # the winner's member id, hex
    handed_off_by: str | None  # the member whose MoveLeader made it, None for an election by timeout
    quorum_lost_by: str | None = None  # a leader that stepped down for want of a quorum before it

    def __str__(self) -> str:
        return f"term {self.term}: {self.leader} ({self.why()})"

    def why(self, name: Callable[[str], str] = str) -> str:
        if self.handed_off_by:
            return f"hand-off from {name(self.handed_off_by)}"
        if self.quorum_lost_by:
            return f"election by timeout after {name(self.quorum_lost_by)} lost its quorum"
        return "election by timeout"


def elections(lines: Iterable[str]) -> list[Election]:
    """Every election these log lines record, by term."""
    won: dict[int, str] = {}
    transfers: dict[tuple[str, int], str] = {}  # (transferee, the term it campaigns for) -> from
    stepping_down: set[str] = set()
    quorum_lost: dict[int, str] = {}  # term -> the leader that stepped down in it
    for line in lines:
        if (m := _WON.search(line)) is not None:
            won[int(m.group(2))] = m.group(1)
        elif (m := _TRANSFER.search(line)) is not None:
            transfers[(m.group(1), int(m.group(2)) + 1)] = m.group(3)
        elif (m := _NO_QUORUM.search(line)) is not None:
            stepping_down.add(m.group(1))
        elif (m := _FOLLOWER.search(line)) is not None and m.group(1) in stepping_down:
            stepping_down.discard(m.group(1))
            quorum_lost[int(m.group(2))] = m.group(1)
    found, previous = [], 0
    for term, leader in sorted(won.items()):
        lost = next((who for t, who in sorted(quorum_lost.items()) if previous <= t < term), None)
        found.append(Election(term, leader, transfers.get((leader, term)), lost))
        previous = term
    return found


def logged(paths: Iterable[Path]) -> list[Election]:
    """The elections in these logs (one member's restarts append to its log; a re-created pod
    starts another)."""
    return elections(line for path in paths for line in path.read_text(errors="replace").splitlines())


def between(found: Iterable[Election], after_term: int, up_to_term: int) -> list[Election]:
    return [e for e in found if after_term < e.term <= up_to_term]
