"""Space and alarms with real etcd and real sidecars: NOSPACE recovers by itself and loses nothing;
defragmentation goes one member at a time, the leader last, while writes flow.

The leader's sidecar acts (raftset.sidecar.pure.maintenance decides) and narrates each action in an
Event; both tests end with the acknowledged-write checker.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from raftset.contract import SidecarEnv
from raftset.sidecar.io.etcdclient import AlarmKind, EtcdClientError, MemberClient
from tests.harness.checker import Writer
from tests.harness.lab import Lab, wait_for
from tests.harness.scenarios import check_members, grow
from tests.harness.waiting import await_for

pytestmark = pytest.mark.etcd

MIB = 1024**2
QUOTA = 16 * MIB
VALUE = "x" * (256 * 1024)


def space_env(lab_options: str, quota: int = QUOTA, **extra: str) -> dict[str, str]:
    options = {**json.loads(lab_options), "quota-backend-bytes": str(quota)}
    return {SidecarEnv.OPTIONS: json.dumps(options), SidecarEnv.MAINTENANCE_INTERVAL: "0.5", **extra}


def events(lab: Lab) -> list[Any]:
    """The sidecars' Events in the lab's namespace, in the order they were written (resourceVersion:
    their timestamps have whole seconds only)."""
    items = lab.core.list_namespaced_event(lab.namespace).items
    return sorted((e for e in items if e.source and e.source.component == "raftset-sidecar"),
                  key=lambda e: int(e.metadata.resource_version))


async def overwrite(client: MemberClient, keys: int, rounds: int) -> int:
    """Rewrite `keys` keys `rounds` times with 256 KiB values: history that compaction frees. Puts done."""
    done = 0
    for r in range(rounds):
        for k in range(keys):
            await client.put(f"/fill/{k}", f"{r}{VALUE}")
            done += 1
    return done


async def test_nospace_recovers_by_itself_and_loses_nothing(make_lab, engine_under_test) -> None:
    lab = make_lab(replicas=3, env_extra=space_env(engine_under_test.options_json))
    await grow(lab, 3)
    leader = await lab.leader_ordinal()
    assert leader is not None
    writer = Writer([lab.pod(o).client_url for o in range(3)])
    writer.start()
    wait_for(lambda: writer.ok > 20, 10, "writer running")
    filler = MemberClient(lab.pod(leader).client_url, timeout=5.0)
    started = time.monotonic()
    try:
        refused = None
        for _ in range(4 * QUOTA // len(VALUE)):  # history only: every key is rewritten
            try:
                await overwrite(filler, keys=4, rounds=1)
            except EtcdClientError as exc:
                refused = exc
                break
        assert refused is not None and "database space exceeded" in refused.message, refused
        raised = time.monotonic()

        async def recovered() -> bool:
            if await filler.alarms():
                return False
            await filler.put("/after-nospace", "ok")
            return True

        await await_for(recovered, 90, "the NOSPACE alarm disarmed by the leader's sidecar and writes accepted")
        took = time.monotonic() - raised
    finally:
        await filler.close()
    wait_for(lambda: writer.ok > 0 and writer.last_ok is not None and time.monotonic() - writer.last_ok < 2,
             20, "the writer writing again")
    writer.stop()
    print(f"NOSPACE after {raised - started:.1f}s of filling; recovered {took:.1f}s later; "
          f"writer ok={writer.ok} failed={writer.failed}")
    reasons = [e.reason for e in events(lab)]
    assert reasons[:1] == ["Compacting"], reasons
    defragmented = [e.message for e in events(lab) if e.reason == "Defragmenting"]
    assert len(defragmented) == 3, defragmented
    leader_pod = lab.pod(leader).name
    assert leader_pod in defragmented[-1] and "leader, last" in defragmented[-1], defragmented
    assert "AlarmDisarmed" in reasons and reasons.index("AlarmDisarmed") > reasons.index("Defragmenting")
    for ordinal in range(3):
        st = await lab.status(ordinal)
        assert st.db_size < QUOTA, f"{lab.pod(ordinal).name} still holds {st.db_size} bytes"
    await check_members(lab, writer, 0, 1, 2)


async def test_defragmentation_goes_leader_last_while_writes_flow(make_lab, engine_under_test) -> None:
    lab = make_lab(replicas=3, env_extra=space_env(
        engine_under_test.options_json, quota=256 * MIB, **{SidecarEnv.DEFRAG_THRESHOLD_PERCENT: "40",
                                           SidecarEnv.DEFRAG_MIN_BYTES: str(2 * MIB)}))
    await grow(lab, 3)
    leader = await lab.leader_ordinal()
    assert leader is not None
    client = MemberClient(lab.pod(leader).client_url, timeout=5.0)
    try:
        await overwrite(client, keys=2, rounds=24)  # ~12 MiB of history over 512 KiB of live data
        writer = Writer([lab.pod(o).client_url for o in range(3)])
        writer.start()
        wait_for(lambda: writer.ok > 20, 10, "writer running")
        # What auto-compaction does every hour: the free pages it leaves are the threshold's business.
        await client.compact(await client.revision())

        def finished() -> bool:
            return any(e.reason == "DefragmentationFinished" for e in events(lab))

        wait_for(finished, 90, "the threshold defragmentation to finish")
        ok_at_end = writer.ok
        wait_for(lambda: writer.ok > ok_at_end + 20, 10, "writes flowing after the defragmentation")
        writer.stop()
    finally:
        await client.close()
    defragmented = [e.message for e in events(lab) if e.reason == "Defragmenting"]
    assert len(defragmented) == 3, defragmented
    assert lab.pod(leader).name in defragmented[-1] and "leader, last" in defragmented[-1], defragmented
    assert not any(lab.pod(leader).name in m for m in defragmented[:-1])
    print(f"defragmented {len(defragmented)} members; writer ok={writer.ok} failed={writer.failed} "
          f"longest stall {writer.longest_stall:.2f}s")
    assert writer.failed == 0, writer.errors[:5]
    for ordinal in range(3):
        st = await lab.status(ordinal)
        assert st.fragmented_bytes < 2 * MIB, f"{lab.pod(ordinal).name}: {st.fragmented_bytes} bytes still free"
    async with MemberClient(lab.pod(leader).client_url) as check_client:
        assert not any(a.kind is AlarmKind.NOSPACE for a in await check_client.alarms())
    # The leader's sidecar counted what it did, and reports every member's lag behind it (as of its
    # last membership publication: a member busy defragmenting then is missing until the next one).
    def lagging(scraped: dict) -> set[str]:
        return {dict(labels)["member"] for name, labels in scraped if name == "raftset_member_raft_index_lag"}

    pods = {lab.pod(o).name for o in range(3)}
    def every_lag() -> dict | None:
        got = lab.pod(leader).metrics()
        return got if lagging(got) == pods else None

    scraped = wait_for(every_lag, 20, "the leader's sidecar to report every member's index lag")
    assert scraped[("raftset_member_role", (("role", "leader"),))] == 1
    assert scraped[("raftset_sidecar_outcomes_total", (("outcome", "defragment"), ("step", "maintenance")))] == 3
    assert scraped[("raftset_sidecar_outcomes_total", (("outcome", "finished"), ("step", "maintenance")))] == 1
    await check_members(lab, writer, 0, 1, 2)
