"""Repairing one member with real etcd and real sidecars: replace on request, a member removed
behind its back, a lost volume. Every scenario ends with the acknowledged-write checker.

The store's container restarts on exit, as kubelet restarts it (`Pod.restart_always`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from etcd3aio import Etcd3Client
from etcd3aio.kv import prefix_range_end

from raftset import contract
from raftset.contract import ReplacePhase, SidecarEnv
from raftset.sidecar.io.etcdclient import ClusterClient, EtcdClientError, LockLost, MemberClient
from raftset.sidecar.io.etcdlock import LOCK_PREFIX
from raftset.replace import Progress, parse_progress
from raftset.sidecar.io import datadir
from raftset.sidecar.pure import replace
from raftset.sidecar.shells.plumbing import LOCK_NAME
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells.replace import ReplaceShell
from tests.harness.checker import Writer
from tests.harness.lab import Lab, Pod
from tests.harness.rot import kubelet_restarts
from tests.harness.scenarios import check_members, grow
from tests.harness.waiting import await_for, wait_for

pytestmark = pytest.mark.etcd


async def ids_by_name(lab: Lab) -> dict[str, int]:
    return {m.name: m.id for m in await lab.members(0, 1, 2)}


async def new_voter(lab: Lab, ordinal: int, old_id: int, timeout: float = 90.0) -> int:
    """Wait until the pod runs a voting member other than `old_id`, with all three voting."""
    name = contract.pod_name(lab.cluster, ordinal)

    async def check() -> int | None:
        members = await lab.members(*(o for o in range(3) if o != ordinal))
        mine = [m for m in members if m.name == name]
        voting = [m for m in members if m.started and not m.is_learner]
        if len(members) == 3 and len(voting) == 3 and mine and mine[0].id != old_id:
            return mine[0].id
        return None
    return await await_for(check, timeout, f"{name} voting as a new member")


def wait_released(pod: Pod) -> None:
    """The repair loop releases the moved-aside data on its first round after our own Status shows a
    voter: up to a poll after readiness (which reads the same Status), so wait for it, bounded."""
    wait_for(lambda: "released the data moved aside" in pod.log_text(), 10, "the moved-aside data released")


def annotations(lab: Lab, ordinal: int) -> dict[str, str]:
    return lab.pod_object(ordinal).metadata.annotations or {}


def finished(lab: Lab, ordinal: int) -> Progress | None:
    """The pod's replace record once finished (Done, Withdrawn): it stays for the operator to tell."""
    record = parse_progress(annotations(lab, ordinal).get(contract.ANNOTATION_REPLACE_PROGRESS))
    return record if record is not None and record.finished else None


async def replace_on_request(lab: Lab, ordinal: int, *, leader: int) -> None:
    await grow(lab, 3)
    await lab.move_leader_to(leader)
    old = (await ids_by_name(lab))[contract.pod_name(lab.cluster, ordinal)]
    writer = Writer([lab.pod(o).client_url for o in range(3) if o != ordinal], lab.client_tls())
    writer.start()
    wait_for(lambda: writer.ok > 20, 10, "the writer running")
    async with kubelet_restarts(lab.pod(ordinal)):
        lab.annotate_pod(ordinal, {contract.ANNOTATION_REPLACE: "true"})
        new = await new_voter(lab, ordinal, old)
        record = wait_for(lambda: contract.ANNOTATION_REPLACE not in annotations(lab, ordinal)
                          and finished(lab, ordinal), 30, "the request cleared, the record finished")
        lab.pod(ordinal).wait_ready()
    written = writer.ok  # a bare `writer.ok > 100` may have held before the replacement ended
    wait_for(lambda: writer.ok > written + 20, 20, "writes flowing after the replacement")
    writer.stop()
    assert new != old
    assert writer.failed == 0, writer.errors[:5]
    # The finished record stays for the operator to tell: both members, every step, why.
    assert (record.phase, record.old_member, record.new_member) == (ReplacePhase.DONE, f"{old:x}", f"{new:x}")
    assert record.steps[-3:] == (ReplacePhase.REJOINING, ReplacePhase.LEARNER, ReplacePhase.DONE), record
    assert ReplacePhase.REMOVING in record.steps and record.cause.startswith("asked for"), record
    wait_released(lab.pod(ordinal))
    log = lab.pod(ordinal).log_text()
    assert "moved aside" in log and "released the data moved aside" in log
    assert datadir.aside(str(lab.pod(ordinal).data_dir)) == []
    assert lab.pod(ordinal).marker()["member_id"] == f"{new:x}"
    await check_members(lab, writer, 0, 1, 2)


@pytest.mark.lifecycle
async def test_replace_a_follower_on_request(make_lab) -> None:
    # The clean grace outlasts the store's liveness probe, as in a rendered pod (300 s against
    # 60 s): a removed Xline member's process runs on with its ports closed until the probe ends
    # it, and meanwhile its new learner, already added, is not started yet.
    lab = make_lab(replicas=3, clean_grace=30.0)
    await replace_on_request(lab, 2, leader=0)


async def test_replace_the_leader_on_request_hands_off_first(make_lab) -> None:
    lab = make_lab(replicas=3)
    await replace_on_request(lab, 0, leader=0)
    assert "replace: leadership moved to" in lab.pod(0).log_text()


async def writing_around_demo_2(lab: Lab) -> tuple[int, Writer]:
    """Three members, the leader on ordinal 0, a writer on 0 and 1: demo-2's member id and the writer."""
    await grow(lab, 3)
    await lab.move_leader_to(0)
    old = (await ids_by_name(lab))["demo-2"]
    writer = Writer([lab.pod(0).client_url, lab.pod(1).client_url], lab.client_tls())
    writer.start()
    wait_for(lambda: writer.ok > 20, 10, "the writer running")
    return old, writer


async def test_a_member_removed_behind_its_back_joins_again_as_a_new_member(make_lab) -> None:
    # Fault c: etcd exits with "member removed"; before the fix its pod crash-looped on the old
    # startup file until somebody deleted it.
    lab = make_lab(replicas=3)
    old, writer = await writing_around_demo_2(lab)
    async with kubelet_restarts(lab.pod(2)):
        async def removed() -> bool:  # etcd refuses while a member connected < 5 s ago: ask again
            async with MemberClient(lab.pod(0).client_url, lab.client_tls()) as c:
                await c.remove(old)
            return True
        await await_for(removed, 30, "MemberRemove of demo-2's member accepted")
        new = await new_voter(lab, 2, old)
        lab.pod(2).wait_ready()
    writer.stop()
    assert new != old and writer.failed == 0, writer.errors[:5]
    assert "deciding the join again" in lab.pod(2).log_text()
    await check_members(lab, writer, 0, 1, 2)


async def test_a_lost_volume_rejoins_as_a_new_member_after_its_old_entry_is_removed(make_lab) -> None:
    lab = make_lab(replicas=3)
    old, writer = await writing_around_demo_2(lab)
    pod = lab.pod(2)
    pod.kill()
    shutil.rmtree(pod.data_dir)  # the volume came back empty; the member is still in Raft
    pod.start(60)
    pod.wait_ready(60)
    new = await new_voter(lab, 2, old)
    writer.stop()
    assert new != old and writer.failed == 0, writer.errors[:5]
    log = pod.log_text()
    assert f"removed our old member entry {old:x}" in log
    # The old entry goes before the new one is added: never two entries for one pod.
    assert log.index("removed our old member entry") < log.rindex("as learner with peer URL")
    # Recorded as a replacement for the operator to tell, with its cause.
    record = wait_for(lambda: finished(lab, 2), 30, "the lost volume's replacement record finished")
    assert (record.phase, record.old_member, record.new_member) == (ReplacePhase.DONE, f"{old:x}", f"{new:x}")
    assert record.cause.startswith("lost volume:") and ReplacePhase.REMOVING in record.steps, record
    await check_members(lab, writer, 0, 1, 2)


async def test_a_follower_with_a_corrupt_db_is_replaced_automatically(make_lab) -> None:
    lab = make_lab(replicas=3, env_extra={SidecarEnv.REPAIR_POLICY: "Automatic"})
    old, writer = await writing_around_demo_2(lab)
    pod = lab.pod(2)
    store = pod.store
    assert store is not None
    os.kill(store.pid, signal.SIGKILL)
    store.wait()
    db = pod.data_dir / "member" / "snap" / "db"
    with open(db, "r+b") as fh:  # both bbolt meta pages and the first pages: etcd refuses to start
        fh.write(os.urandom(8192))
    async with kubelet_restarts(pod):
        new = await new_voter(lab, 2, old, timeout=120)
        wait_for(lambda: finished(lab, 2), 30, "the replacement record finished")
        pod.wait_ready()
    written = writer.ok
    wait_for(lambda: writer.ok > written + 20, 20, "writes flowing after the replacement")
    writer.stop()
    assert new != old and writer.failed == 0, writer.errors[:5]
    wait_released(pod)
    log = pod.log_text()
    assert "data corrupt" in log and "moved aside" in log and "released the data moved aside" in log
    assert int(annotations(lab, 2)[contract.ANNOTATION_RESTART_BASELINE]) >= 2
    await check_members(lab, writer, 0, 1, 2)


class RemovalPorts:
    """What the replace shell's self-removal asks of its ports (peers, API, rejoin), over real etcd; `statuses` lets the test
    act inside the section, between the decision under the lock and the MemberRemove."""

    def __init__(self, lab: Lab, ordinal: int, inside: Callable[[], Awaitable[None]]) -> None:
        self.settings = SimpleNamespace(client_url=lab.pod(ordinal).client_url,
                                        pod_name=contract.pod_name(lab.cluster, ordinal))
        self.kube = self
        self.etcd = ClusterClient(timeout=3.0)
        self.urls = [lab.pod(o).client_url for o in range(3)]
        self.inside = inside
        self.removed: list[int] = []
        self.rejoined: list[str] = []

    def candidates(self, kept: list[int], leases: list[Any]) -> list[str]:
        return self.urls

    async def authoritative_members(self, urls: list[str]) -> tuple[MemberClient, list[Any], bool]:
        client, members = await self.etcd.member_list(urls)
        return client, members, True

    async def answers(self) -> dict[int, Any]:
        answers = await self.etcd.statuses(self.urls, timeout=2.0)
        return {st.member_id: st for st in answers.values() if st is not None}

    async def statuses(self, members: list[Any]) -> dict[int, Any]:
        answers = await self.answers()
        await self.inside()
        return answers

    async def member_remove(self, client: MemberClient, member_id: int) -> EtcdClientError | None:
        """As Peers.member_remove: one attempt, etcd's refusal returned."""
        self.removed.append(member_id)
        try:
            await client.remove(member_id)
        except EtcdClientError as exc:
            return exc
        return None

    async def rejoin(self, reason: str) -> None:
        self.rejoined.append(reason)

    async def annotate_pod(self, name: str, body: dict[str, Any]) -> None:
        pass


async def test_a_replacement_whose_lock_is_lost_before_its_removal_removes_nothing(make_lab) -> None:
    """The repair shell's MemberRemove of its own member under the real membership lock, whose lease
    is revoked inside the section: the fence stops the removal, and the member stays in Raft."""
    lab = make_lab(replicas=3)
    await grow(lab, 3)
    await lab.move_leader_to(0)
    await asyncio.sleep(6)  # etcd refuses a removal ("unhealthy cluster") while a peer connected < 5 s ago
    ids = await ids_by_name(lab)
    own = ids[contract.pod_name(lab.cluster, 1)]
    async with Etcd3Client([f"{lab.pod(0).ip}:2379"]) as etcd:
        assert etcd.lease is not None
        revoked: list[int] = []

        async def lose_the_lock() -> None:
            """Revoke the lease of the lock's holder: the removal's own lock, since we are in its section."""
            assert etcd.kv is not None and etcd.lease is not None
            prefix = f"{LOCK_PREFIX}/{LOCK_NAME}/".encode()
            keys = (await etcd.kv.get(prefix, prefix_range_end(prefix))).kvs
            holder = min(keys, key=lambda kv: kv.create_revision)
            await etcd.lease.revoke(int(holder.lease))
            revoked.append(int(holder.lease))

        ports = RemovalPorts(lab, 1, lose_the_lock)
        members = await lab.members(0, 1, 2)
        first = replace.ReplaceView(requested=True, progress=None, own_id=own, members=members,
                                   statuses=await ports.answers(), size=3, leading=False, hand_off=True,
                                   target=None, diagnosis=None, automatic=False, doubtful=False, alarms=(),
                                   lock_held=False)
        assert replace.decide(first).act is replace.Act.REMOVE
        shell = ReplaceShell(ports.settings, State.initial(ports.settings.pod_name, datetime.now(timezone.utc)),  # type: ignore[arg-type]
                             ports, ports, rejoin=ports.rejoin)
        try:
            with pytest.raises(LockLost, match="expired or was revoked"):
                await shell.remove_self(own, [0, 1, 2], first)
        finally:
            await ports.etcd.close()
    assert revoked, "the section never ran: the lock was not lost inside it"
    assert ports.removed == [] and ports.rejoined == [], "MemberRemove was sent after the lock was lost"
    assert own in {m.id for m in await lab.members(0, 2)}, "the member was removed without the lock"
