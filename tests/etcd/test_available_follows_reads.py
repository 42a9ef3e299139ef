"""Available follows linearizable reads, not Status alone (issue 30, bug 4).

Every member of a real etcd cluster answers Status and names the same leader, yet no read
commits: the leader is cut off from its followers (their peer ports refused behind Toxiproxy)
before CheckQuorum steps it down, and before any follower's election timer fires. A long
election timeout (10 s) holds that state for at least 10 s, so the test is deterministic: the
leader checks its quorum once per election timeout, and a check right after the cut still
counts the messages received before it. Each sidecar's heartbeat Lease must then say "not
ready", and the operator's status computation over those Leases must say Available=False.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from raftset.contract import SidecarEnv
from raftset.operator.pure import spec
from raftset.operator.pure.heartbeats import HeartbeatRecord, from_lease
from raftset.operator.pure.planner import Plan
from raftset.operator.pure.events import Condition
from raftset.operator.pure.status import conditions
from tests.harness.lab import Lab, http_get, wait_for
from tests.harness.scenarios import grow
from tests.harness.toxiproxy import Toxiproxy, peer_proxy_name, route_peers
from tests.harness.waiting import await_for

pytestmark = pytest.mark.etcd

ELECTION_TIMEOUT_S = 10
# etcd wants the election timeout at least 5 heartbeats; the first member's own election takes
# one to two timeouts (it has no peer to fast-forward its ticks with).
OPTIONS = {"heartbeat-interval": "100", "election-timeout": str(ELECTION_TIMEOUT_S * 1000)}
STEADY = Plan(3, (), "steady", "3 members as desired")


@pytest.fixture
def toxiproxy(tmp_path: Path) -> Iterator[Toxiproxy]:
    with Toxiproxy(tmp_path / "toxiproxy") as proxy:
        yield proxy


def records(lab: Lab) -> list[HeartbeatRecord]:
    """The heartbeat Leases as the operator reads them (expiring by renewTime: one machine, one clock)."""
    found = (from_lease(lab.coordination.api_client.sanitize_for_serialization(lease))
             for lease in lab.leases().values())
    return sorted((r for r in found if r is not None), key=lambda r: r.ordinal)


def available(lab: Lab) -> Condition:
    """The operator's Available over the Leases and the last published Raft membership."""
    cluster = spec.parse({"apiVersion": "raftset.dev/v1alpha1", "kind": "EtcdCluster",
                          "metadata": {"name": lab.cluster, "namespace": lab.namespace, "uid": "u", "generation": 1},
                          "spec": {"replicas": 3}}, default_workload_kind="StatefulSet")
    found = conditions(cluster, STEADY, records(lab), datetime.now(timezone.utc), None, raft=lab.membership())
    return next(c for c in found if c.type == "Available")


def cut(lab: Lab, toxiproxy: Toxiproxy, connected: bool) -> None:
    for ordinal in range(3):
        toxiproxy.set_enabled(peer_proxy_name(ordinal), connected)


async def test_every_member_naming_a_leader_while_no_read_commits_is_not_available(
        make_lab, toxiproxy: Toxiproxy) -> None:
    lab = make_lab(replicas=3, env_extra={SidecarEnv.OPTIONS: json.dumps(OPTIONS)})
    route_peers(lab, toxiproxy, range(3))
    await grow(lab, 3)
    leader = await lab.leader_ordinal(0, 1, 2)
    assert leader is not None
    leader_id = (await lab.status(leader)).member_id

    def settled() -> bool:
        """Available, with every member a healthy voter in its heartbeat and in the published membership."""
        raft, beats = lab.membership(), records(lab)
        return (raft is not None and sum(m.voter for m in raft.members) == 3 and len(beats) == 3
                and all(r.healthy and r.voting for r in beats) and available(lab).status)
    wait_for(settled, 30, "Available, three healthy voters in the heartbeats and the published membership")

    cut(lab, toxiproxy, connected=False)
    cut_at = time.monotonic()

    async def names_the_leader_everywhere() -> bool:
        named = {o: (await lab.status(o)).leader for o in range(3)}
        assert set(named.values()) == {leader_id}, f"Status no longer names demo-{leader} everywhere: {named}"
        return True

    async def nothing_served() -> bool:
        """Every member names the leader, every /readyz says its read failed (so far the pods' Ready)."""
        await names_the_leader_everywhere()
        answers = {o: http_get(f"{lab.pod(o).sidecar_url}/readyz") for o in range(3)}
        return all(code == 503 and "a linearizable read failed" in body for code, body in answers.values())

    await await_for(nothing_served, ELECTION_TIMEOUT_S - 2, "every /readyz failing its read while Status names the leader")

    async def not_available() -> Condition:
        await names_the_leader_everywhere()
        found = available(lab)
        assert not found.status, f"the operator's Available over the Leases: {found}"
        return found

    found = await await_for(not_available, 3, "the Leases to carry the failed reads to the operator's Available")
    await names_the_leader_everywhere()  # still the state under test: nobody stepped down or campaigned
    assert time.monotonic() - cut_at < ELECTION_TIMEOUT_S
    print(f"after the cut: {found}")
    assert found.reason == "NotServing", found
    assert found.message.startswith(f"3 of 3 members healthy with leader demo-{leader}, but 0 serving"), found
    for record in records(lab):
        assert record.healthy and not record.ready, record  # health stays Status's; readiness is the read's
        assert record.ready_reason.startswith("a linearizable read failed"), record
    for ordinal in range(3):
        beat = lab.pod(ordinal).heartbeat()
        assert beat["healthy"] and beat["ready"] is False, beat

    cut(lab, toxiproxy, connected=True)
    healed = wait_for(lambda: (found := available(lab)).message.startswith("3 of 3 members healthy, 3 serving")
                      and found, 90, "every member serving again once the peers reconnect")
    assert (healed.status, healed.reason) == (True, "QuorumHealthy"), healed
