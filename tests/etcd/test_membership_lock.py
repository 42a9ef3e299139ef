"""Fault d with real etcd and real sidecars: the membership lock lost in the middle of a section.

The lock is etcd's usual lease + key protocol. Someone else (here: the test, with
etcd3aio's own lock on the same name, as a sidecar of the previous release would) can take
it over once the holder's lease is gone. No membership change may then be made by the old
holder; it abandons the section, survives, and finishes the job under a new lock.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from etcd3aio import Etcd3Client
from etcd3aio.kv import prefix_range_end

from raftset.etcdclient import LockLost, MemberClient, Unreachable
from raftset.sidecar.plumbing import LOCK_NAME
from raftset.sidecar.supervision import TEST_FAULT_DIR_ENV
from tests.harness.checker import Writer
from tests.harness.lab import Lab, http_get, wait_for
from tests.harness.scenarios import check_members, grow
from tests.harness.waiting import await_for

pytestmark = pytest.mark.etcd

PREFIX_ROOT = "__etcd3aio:lock"  # etcd3aio's layout, which the sidecars' lock keeps


async def lock_keys(client: Etcd3Client, name: str = LOCK_NAME) -> list[tuple[bytes, int]]:
    """(key, lease) of every waiter for the lock, oldest first."""
    assert client.kv is not None
    prefix = f"{PREFIX_ROOT}/{name}/".encode()
    r = await client.kv.get(prefix, prefix_range_end(prefix))
    return [(bytes(kv.key), int(kv.lease)) for kv in sorted(r.kvs, key=lambda kv: kv.create_revision)]


async def test_the_lock_outlives_its_ttl_until_released_and_its_fence_sees_a_revoked_lease(make_lab) -> None:
    lab: Lab = make_lab(replicas=1)
    await grow(lab, 1)
    url = lab.pod(0).client_url
    async with MemberClient(url, timeout=3) as holder, MemberClient(url, timeout=3) as contender, \
            Etcd3Client([f"{lab.pod(0).ip}:2379"]) as etcd:
        assert etcd.lease is not None
        async with holder.lock("test/held", ttl=2, timeout=5) as held:
            await asyncio.sleep(7)  # three and a half TTLs: renewed, not expired
            with pytest.raises(Unreachable, match="timed out waiting for the lock"):
                async with contender.lock("test/held", ttl=2, timeout=1):
                    pass
            assert len(await lock_keys(etcd, "test/held")) == 1, "a timed-out waiter leaves no key behind"
            await held.fence(0.5)  # held, with time left for a 0.5 s mutation
            with pytest.raises(LockLost, match="left on the lock's lease"):
                await held.fence(5.0)  # more than a 2 s lease can promise
            await etcd.lease.revoke(held.lease_id)
            with pytest.raises(LockLost, match="expired or was revoked"):
                await held.fence(0.5)
        async with contender.lock("test/held", ttl=2, timeout=5) as other:
            await other.fence(0.5)


async def test_lock_lost_mid_clean_changes_nothing_until_the_lock_is_held_again(make_lab, tmp_path: Path) -> None:
    faults = tmp_path / "faults"
    faults.mkdir()
    lab: Lab = make_lab(replicas=3, clean_grace=2.0, env_extra={TEST_FAULT_DIR_ENV: str(faults)})
    await grow(lab, 3)
    await lab.move_leader_to(0)  # the cleaner is ordinal 0's sidecar
    victim = next(m for m in await lab.members(0) if m.name == "demo-2")
    writer = Writer([lab.pod(0).client_url, lab.pod(1).client_url])
    writer.start()
    wait_for(lambda: writer.ok > 20, 10, "writer running")
    # The cleaner's section holds inside the lock, before it decides again, until the test lets it
    # go: the revoke lands in the section however slowly this machine runs the test.
    hold = faults / "clean-locked.hang"
    hold.touch()
    # Ordinal 2 is scaled away and gone: clean will remove it once it has been absent for the grace.
    lab.scale(2)
    lab.pod(2).kill()
    async with Etcd3Client([f"{lab.pod(0).ip}:2379"]) as etcd:
        assert etcd.lease is not None
        await await_for(lambda: asyncio.to_thread((faults / "clean-locked.hanging").exists), 60,
                        "the cleaner holding the lock, inside its section")
        assert victim.id in {m.id for m in await lab.members(0, 1)}
        (key, lease), *_ = await lock_keys(etcd)
        await etcd.lease.revoke(lease)  # its lease is gone: so is its lock
        async with etcd.lock(LOCK_NAME, ttl=30):  # and someone else holds it now
            assert (await lock_keys(etcd))[0][0] != key
            hold.unlink()  # the old holder goes on with its section, and must find the lock lost
            await lab.logged(f"lock {LOCK_NAME} lost: the lock's lease expired or was revoked", 0, timeout=30)
            ids = {m.id for m in await lab.members(0, 1)}
            assert victim.id in ids, "the old holder removed a member without the lock"
            assert "clean: removed member" not in lab.pod(0).log_text()
        # Lock released: the cleaner decides again under a new lock and removes the member, once.
        await lab.logged(f"clean: removed member {victim.hex_id}", 0, timeout=30)
    members = await lab.wait_voting(2, 30, 0, 1)
    assert victim.id not in {m.id for m in members}
    log = lab.pod(0).log_text()
    assert log.count("clean: removed member") == 1
    assert "unexpected error" not in log
    leader = lab.pod(0)
    assert leader.sidecar is not None and leader.sidecar.poll() is None, "losing the lock is not fatal"
    assert http_get(f"{leader.sidecar_url}/livez")[0] == 200
    acked = writer.ok
    wait_for(lambda: writer.ok > acked + 20 and leader.ready(), 10, "writes flowing, the leader ready")
    writer.stop()
    assert writer.failed == 0, writer.errors[:5]
    await check_members(lab, writer, 0, 1)
