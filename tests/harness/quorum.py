"""Quorum loss on a Lab: lose members with their data, read the survivors as the operator
would, record a recovery on the workload as the operator does, and measure what came back.
"""

from __future__ import annotations

import shutil
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from kubernetes import client as k8s

from raftset import contract
from raftset.etcdclient import MemberClient
from raftset.operator import heartbeats
from raftset.quorumloss import RecoveryRecord, Survivor
from tests.harness.checker import PREFIX, Ack
from tests.harness.lab import Lab
from tests.harness.waiting import await_for, wait_for


def lose(lab: Lab, *ordinals: int) -> None:
    """These members are gone for good: SIGKILLed, their volumes destroyed."""
    for ordinal in ordinals:
        pod = lab.pod(ordinal)
        pod.kill()
        shutil.rmtree(pod.data_dir.parent, ignore_errors=True)


def survivors(lab: Lab, *ordinals: int) -> list[Survivor]:
    """The survivors as their heartbeat Leases publish them once they know there is no leader,
    read with the operator's own parser (raftset.operator.heartbeats)."""
    serialize = k8s.ApiClient().sanitize_for_serialization

    def read() -> list[Survivor] | None:
        leases = lab.leases()
        out = []
        for ordinal in ordinals:
            lease = leases.get(lab.pod(ordinal).name)
            beat = heartbeats.from_lease(serialize(lease)) if lease is not None else None
            if beat is None or beat.healthy:
                return None  # none yet, or written before the loss: wait for the write that says so
            out.append(Survivor(pod=beat.pod, ordinal=ordinal, member_id=beat.member_id, committed=beat.raft_index,
                                term=beat.raft_term, applied=beat.applied_index))
        return out
    return wait_for(read, 60, f"heartbeats of {ordinals} without a leader")


def record_recovery(lab: Lab, survivor: Survivor, requested: str = contract.RECOVER_QUORUM_AUTO) -> RecoveryRecord:
    """What the operator writes on the workload when a recovery starts."""
    record = RecoveryRecord(id=uuid.uuid4().hex[:8], survivor=survivor.pod, member_id=survivor.member_id,
                            started=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), requested=requested)
    patch = {"metadata": {"annotations": {contract.ANNOTATION_QUORUM_RECOVERY: record.to_json()}}}
    lab.apps.patch_namespaced_stateful_set(lab.cluster, lab.namespace, patch)
    return record


def end_recovery(lab: Lab) -> None:
    patch = {"metadata": {"annotations": {contract.ANNOTATION_QUORUM_RECOVERY: None}}}
    lab.apps.patch_namespaced_stateful_set(lab.cluster, lab.namespace, patch)


async def frozen_revision(lab: Lab, ordinal: int) -> int:
    """The revision a member without quorum holds: applied caught up with committed, read locally."""
    async def settled() -> int | None:
        st = await lab.status(ordinal)
        if st.raft_applied_index < st.raft_index:
            return None
        async with MemberClient(lab.pod(ordinal).client_url, lab.client_tls(), timeout=3) as c:
            revision, _ = await c.get_prefix(PREFIX, serializable=True)
        return revision
    return await await_for(settled, 30, f"ordinal {ordinal} applied what it committed")


def lost_by_revision(acked: dict[str, Ack], survivor_revision: int) -> dict[str, Ack]:
    """The acknowledged writes above what the survivor held: what a forced restart cannot keep."""
    return {k: a for k, a in acked.items() if a.revision > survivor_revision}


@dataclass
class Clock:
    """Monotonic marks of one recovery, for the RTO the tests print and docs/operations.md records."""

    lost: float = 0.0
    started: float = 0.0
    writable: float = 0.0
    full: float = 0.0

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def report(self, label: str, lost_writes: int, acked: int) -> str:
        return (f"{label}: recovery start -> writable {self.writable - self.started:.1f} s, "
                f"-> full size {self.full - self.started:.1f} s; acknowledged writes lost {lost_writes} of {acked}")
