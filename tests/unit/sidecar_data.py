"""Pure test data for the sidecar's unit tests: members, statuses, naming."""

from __future__ import annotations

from raftset.sidecar.io.etcdclient import Member, Status
from raftset.sidecar.pure.config import Naming

CLUSTER = "demo"
NAMING = Naming(CLUSTER, "ns", "http://{pod}.demo-peer.{namespace}.svc:2380",
                "http://{pod}.demo-peer.{namespace}.svc:2379")


def mid(ordinal: int) -> int:
    return 0x1000 + ordinal


def member(ordinal: int, *, learner: bool = False, started: bool = True, naming: Naming = NAMING,
           member_id: int | None = None) -> Member:
    return Member(
        id=mid(ordinal) if member_id is None else member_id,
        name=naming.pod(ordinal) if started else "",
        peer_urls=(naming.peer_url(ordinal),),
        client_urls=(naming.client_url(ordinal),) if started else (),
        is_learner=learner,
    )


def status(ordinal: int, *, leader: int | None = 0, applied: int = 100, learner: bool = False,
           errors: tuple[str, ...] = ()) -> Status:
    return Status(
        endpoint=NAMING.client_url(ordinal), member_id=mid(ordinal), cluster_id=0xC1,
        leader=mid(0) if leader is not None and leader == 0 else (mid(leader) if leader is not None else 0),
        raft_term=3, raft_index=applied, raft_applied_index=applied, is_learner=learner, errors=errors,
        version="3.4.23", db_size=1,
    )
