"""The quorum-loss shell of one reconcile: gather the view, ask quorum_loss.decide, carry out its step.

Writes at most: the record on the workload (start) or its removal (finish), the recovery's
start Event, the removal of the user's request annotation, and pod deletions for pods that
started before the record (their sidecars read it when they start again). Membership itself is
never touched here.

The start Event is the one write whose loss a restart could not see from the status alone, so
it is posted (and awaited) before the status that names the recovery is patched, under a name
derived from the recovery id: an operator killed anywhere in between posts it again as the
same object, never as a second Event.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import kopf

from raftset import contract
from raftset.membership import RaftMembership
from raftset.operator.pure import quorum_loss
from raftset.operator.pure.narration import named_event
from raftset.operator.pure.heartbeats import HeartbeatRecord
from raftset.operator.io.kube import KubeClient
from raftset.operator.pure.spec import Cluster
from raftset.operator.pure.status import Condition
from raftset.quorum_loss import QuorumLossRecord, parse_record


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


async def reconcile(kube: KubeClient, body: kopf.Body, patch: kopf.Patch, cluster: Cluster, kept: Sequence[int],
                    beats: Sequence[HeartbeatRecord], raft: RaftMembership | None,
                    workload: Mapping[str, Any], previous: Mapping[str, Any], now: datetime) -> Condition:
    """One step of quorum-loss handling; returns the QuorumLost condition for the status."""
    record = parse_record(_annotations(workload).get(contract.ANNOTATION_QUORUM_RECOVERY))
    shown = quorum_loss.previous_condition(previous)
    view = quorum_loss.QuorumView(
        cluster=cluster.name, kind_short=cluster.engine.short_name, replicas=cluster.replicas, kept=kept,
        raft=raft, beats=beats, request=_annotations(body).get(contract.ANNOTATION_RECOVER_QUORUM) or None,
        policy=cluster.recovery.quorum_loss, grace_seconds=cluster.recovery.grace_seconds,
        lost_since=quorum_loss.lost_since(previous), record=record,
        force_supported=cluster.engine.capabilities.force_new_cluster, now=now, new_id=uuid.uuid4().hex[:8],
        previous=shown, announced=record is not None and shown is not None and quorum_loss.narrated(shown, record),
    )
    decision = quorum_loss.decide(view)
    backend = cluster.backend
    if decision.start is not None:
        await kube.merge_patch(backend.api_version, backend.kind, cluster.namespace, cluster.name,
                               {"metadata": {"annotations": {
                                   contract.ANNOTATION_QUORUM_RECOVERY: decision.start.to_json()}}})
        record = decision.start
    if decision.announce is not None and record is not None:
        await kube.apply(started_event(body, record, decision.announce, now))
    if decision.finish:
        await kube.merge_patch(backend.api_version, backend.kind, cluster.namespace, cluster.name,
                               {"metadata": {"annotations": {contract.ANNOTATION_QUORUM_RECOVERY: None}}})
        record = None
    if decision.drop_request:
        patch.metadata.annotations[contract.ANNOTATION_RECOVER_QUORUM] = None
    for kind, reason, message in (*decision.events, *quorum_loss.announcements(previous, decision.condition)):
        kopf.event(body, type=kind, reason=reason, message=message)
    if record is not None:
        pods = await kube.list("v1", "Pod", cluster.namespace, contract.label_selector(cluster.name))
        for name in quorum_loss.restart(pods, record):
            await kube.delete("v1", "Pod", cluster.namespace, name)
            kopf.event(body, type="Normal", reason="QuorumRecoveryRestart",
                       message=f"recovery {record.id}: {name} restarts so that its sidecar reads the recovery")
    return decision.condition


def started_event(body: kopf.Body, record: QuorumLossRecord, event: tuple[str, str, str],
                  now: datetime) -> dict[str, Any]:
    """The recovery's start Event, named after the recovery: applied twice, still one."""
    return named_event(body, f"{body.metadata.name}.quorum-recovery-{record.id}", event, now)
