"""The quorum-loss shell of one reconcile: gather the view, ask recovery.decide, carry out its step.

Writes at most: the record on the workload (start) or its removal (finish), the removal of
the user's request annotation, and pod deletions for pods that started before the record
(their sidecars read it when they start again). Membership itself is never touched here.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import kopf

from raftset import contract
from raftset.membership import RaftMembership
from raftset.operator import recovery
from raftset.operator.heartbeats import HeartbeatRecord
from raftset.operator.kube import Kube
from raftset.operator.spec import Cluster
from raftset.operator.status import Condition
from raftset.quorumloss import parse_record


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


async def reconcile(kube: Kube, body: kopf.Body, patch: kopf.Patch, cluster: Cluster, kept: Sequence[int],
                    beats: Sequence[HeartbeatRecord], raft: RaftMembership | None,
                    workload: Mapping[str, Any], previous: Mapping[str, Any], now: datetime) -> Condition:
    """One step of quorum-loss handling; returns the QuorumLost condition for the status."""
    record = parse_record(_annotations(workload).get(contract.ANNOTATION_QUORUM_RECOVERY))
    view = recovery.QuorumView(
        cluster=cluster.name, kind_short=cluster.engine.short_name, replicas=cluster.replicas, kept=kept,
        raft=raft, beats=beats, request=_annotations(body).get(contract.ANNOTATION_RECOVER_QUORUM) or None,
        policy=cluster.recovery.quorum_loss, grace_seconds=cluster.recovery.grace_seconds,
        lost_since=recovery.lost_since(previous), record=record,
        force_supported=cluster.engine.capabilities.force_new_cluster, now=now, new_id=uuid.uuid4().hex[:8],
    )
    decision = recovery.decide(view)
    backend = cluster.backend
    if decision.start is not None:
        await kube.merge_patch(backend.api_version, backend.kind, cluster.namespace, cluster.name,
                               {"metadata": {"annotations": {
                                   contract.ANNOTATION_QUORUM_RECOVERY: decision.start.to_json()}}})
        record = decision.start
    if decision.finish:
        await kube.merge_patch(backend.api_version, backend.kind, cluster.namespace, cluster.name,
                               {"metadata": {"annotations": {contract.ANNOTATION_QUORUM_RECOVERY: None}}})
        record = None
    if decision.drop_request:
        patch.metadata.annotations[contract.ANNOTATION_RECOVER_QUORUM] = None
    for kind, reason, message in (*decision.events, *recovery.announcements(previous, decision.condition)):
        kopf.event(body, type=kind, reason=reason, message=message)
    if record is not None:
        pods = await kube.list("v1", "Pod", cluster.namespace, contract.label_selector(cluster.name))
        for name in recovery.restart(pods, record):
            await kube.delete("v1", "Pod", cluster.namespace, name)
            kopf.event(body, type="Normal", reason="QuorumRecoveryRestart",
                       message=f"recovery {record.id}: {name} restarts so that its sidecar reads the recovery")
    return decision.condition
