"""Which raft elections happened and why, read from the etcd members' own logs.

A raw term count cannot tell the leader's hand-off (MoveLeader: raft sends the transferee
MsgTimeoutNow) from an election a busy machine called because a heartbeat came late, so a test
that counts terms fails for the machine's reasons. etcd's raft logs both events:
"<id> [term T] received MsgTimeoutNow from <leader> ..." on the transferee, then
"<id> became leader at term T+1" on the winner.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_WON = re.compile(r"\b([0-9a-f]+) became leader at term (\d+)")
_TRANSFER = re.compile(r"\b([0-9a-f]+) \[term (\d+)\] received MsgTimeoutNow from ([0-9a-f]+)")


@dataclass(frozen=True)
class Election:
    term: int  # the term the winner leads
    leader: str  # the winner's member id, hex
    handed_off_by: str | None  # the member whose MoveLeader made it, None for an election by timeout

    def __str__(self) -> str:
        why = f"hand-off from {self.handed_off_by}" if self.handed_off_by else "election by timeout"
        return f"term {self.term}: {self.leader} ({why})"


def elections(lines: Iterable[str]) -> list[Election]:
    """Every election these log lines record, by term."""
    won: dict[int, str] = {}
    transfers: dict[tuple[str, int], str] = {}  # (transferee, the term it campaigns for) -> from
    for line in lines:
        if (m := _WON.search(line)) is not None:
            won[int(m.group(2))] = m.group(1)
        elif (m := _TRANSFER.search(line)) is not None:
            transfers[(m.group(1), int(m.group(2)) + 1)] = m.group(3)
    return [Election(term, leader, transfers.get((leader, term))) for term, leader in sorted(won.items())]


def logged(paths: Iterable[Path]) -> list[Election]:
    """The elections in these logs (one member's restarts append to its log; a re-created pod
    starts another)."""
    return elections(line for path in paths for line in path.read_text(errors="replace").splitlines())


def between(found: Iterable[Election], after_term: int, up_to_term: int) -> list[Election]:
    return [e for e in found if after_term < e.term <= up_to_term]
