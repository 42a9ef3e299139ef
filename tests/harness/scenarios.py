"""Scenarios several tiers run against a Lab: grow a cluster, scale in under a writer.

Every scale-in ends with the acknowledged-write checker (tests.harness.checker.check).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from raftset.etcdclient import MAX_RECONNECT_BACKOFF_S
from tests.harness.checker import Verdict, Writer, check
from tests.harness.lab import Lab, wait_for
from tests.harness.waiting import await_for

STALL_BOUND_S = 5.0  # generous: a clean hand-off stalls well under a second


async def scale_in_under_writer(lab: Lab, *, leader: int) -> tuple[dict, Writer]:
    """3 -> 2 with the leader on `leader`; the writer talks to the members that stay.

    The result carries `elections`: how far the raft term moved during the scale-in, and
    `verdict`: the checker's, on the two members that stay.
    """
    await grow(lab, 3)
    await lab.move_leader_to(leader)
    term = await settled_term(lab, 0, 1, 2)
    writer = Writer([lab.pod(0).client_url, lab.pod(1).client_url], lab.client_tls())
    writer.start()
    wait_for(lambda: writer.ok > 20, 10, "writer running")
    lab.scale(2)
    result = lab.pod(2).terminate()
    await lab.wait_voting(2, 30, 0, 1)
    wait_for(lambda: writer.ok > 50, 10, "writer keeps writing")
    writer.stop()
    assert result is not None
    result["elections"] = await settled_term(lab, 0, 1) - term
    result["verdict"] = await check_members(lab, writer, 0, 1)
    return result, writer


async def settled_term(lab: Lab, *ordinals: int, timeout: float = 10.0) -> int:
    """The term every one of `ordinals` reports, once they agree on it and on the leader.

    etcd's Status gives the term of the last entry a member applied, so right after an
    election a follower still reports the old term until it applies the new leader's first
    entry (a heartbeat later; 20 ms and more between zones).
    """
    async def agreed() -> int | None:
        views = {(st.raft_term, st.leader) for st in [await lab.status(o) for o in ordinals]}
        (term, leader), *others = views
        return term if not others and leader else None
    return await await_for(agreed, timeout, f"one term and one leader on ordinals {list(ordinals)}")


def writing(lab: Lab, *ordinals: int) -> Writer:
    """A writer on these members, once it has written."""
    writer = Writer([lab.pod(o).client_url for o in ordinals], lab.client_tls())
    writer.start()
    wait_for(lambda: writer.ok > 20, 20, "writer running")
    return writer


async def check_members(lab: Lab, writer: Writer, *ordinals: int) -> Verdict:
    """The checker on these members: every acknowledged write reads back, one HashKV."""
    return await check([lab.pod(o).client_url for o in ordinals], writer.acked, lab.client_tls())


async def reconnected() -> None:
    """Outwait every gRPC channel's reconnect backoff: a channel that was refused before its member
    served fails fast until then, so a Status through it answers "down" at once instead of waiting."""
    await asyncio.sleep(MAX_RECONNECT_BACKOFF_S * 1.2 + 0.3)


async def grow(lab: Lab, upto: int) -> None:
    """Start ordinals 0..upto-1 of a new cluster: one after the other, each once the one before is
    ready (as an OrderedReady StatefulSet would), where the engine bootstraps alone; where it
    cannot (Xline), all at once, as the workload's Parallel pod management starts them, since no
    initial member is ready before a quorum of them runs."""
    if lab.engine.engine.capabilities.bootstrap_alone:
        for ordinal in range(upto):
            pod = lab.pod(ordinal)
            pod.start()
            pod.wait_ready()
    else:
        await start_together(lab, range(upto))
    await lab.wait_voting(upto)
    if not lab.engine.engine.capabilities.bootstrap_alone:
        # Each sidecar asked its peers before they served: its channels to them may fail fast until
        # their reconnect backoff ends, and a leave's quorum check would count them as down.
        await reconnected()


async def start_together(lab: Lab, ordinals: Iterable[int], timeout: float = 60.0) -> None:
    """kubelet with Parallel pods: every sidecar at once, each store as soon as its startupProbe passes."""
    pods = [lab.pod(o) for o in ordinals]
    for pod in pods:
        lab.create_pod(pod.ordinal)
        pod.start_sidecar()
    deadline = time.monotonic() + timeout
    while any(p.store is None for p in pods) and time.monotonic() < deadline:
        for pod in pods:
            if pod.store is None and pod.startup_ok():
                pod.start_store()
        await asyncio.sleep(0.2)
    assert all(p.store is not None for p in pods), lab.logs()
    for pod in pods:
        pod.wait_ready()


async def restart_in_place(lab: Lab, ordinal: int, voters: int = 3) -> dict[str, Any]:
    """One pod of a rolling update: its preStop leaves Raft alone (the member stays), it comes
    back ready on its data, and all `voters` vote again before the next pod goes.

    Then it settles, as the operator's roll does (a heartbeat interval from the new pod): a
    client's channel to the member that just came back may fail fast until its reconnect
    backoff ends, and the next restart must not take a second endpoint from it meanwhile.
    Returns what its /leave did (`moved_leader_to`: the leader's hand-off).
    """
    result = lab.pod(ordinal).terminate()
    assert result is not None and not result["removed"], result
    await back_in_place(lab, ordinal, voters)
    return result


async def back_in_place(lab: Lab, ordinal: int, voters: int = 3) -> None:
    """A stopped pod of a roll starts again on its data: ready, all `voters` voting, channels settled."""
    pod = lab.pod(ordinal)
    pod.start()
    pod.wait_ready()
    await lab.wait_voting(voters)
    await reconnected()
