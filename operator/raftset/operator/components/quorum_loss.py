"""The quorum-loss component: gather the view, ask pure.quorum_loss.decide, carry out its step.

Writes at most: the record on the workload (start) or its removal (finish), the quorum-loss
recovery's start Event, the removal of the user's request annotation, and pod deletions for pods
that started before the record (their sidecars read it when they start again). Membership itself
is never touched here.

The start Event is the one write whose loss a restart could not see from the status alone, so
it is posted (and awaited) before the status that names the recovery is patched, under a name
derived from the recovery id: an operator killed anywhere in between posts it again as the
same object, never as a second Event.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from raftset import contract
from raftset.operator.components.protocol import Owned, Round
from raftset.operator.io.api import KubeAPI
from raftset.operator.io.kube import api_error_message
from raftset.operator.pure import quorum_loss
from raftset.operator.pure.events import Condition, Event
from raftset.operator.pure.narration import named_event
from raftset.quorum_loss import QuorumLossRecord, parse_record


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


class QuorumLoss(Owned):
    """Runs on every round that has a workload, whatever the writes before it did: a cluster that lost
    quorum is the one whose other objects may not apply."""

    name = "quorum-loss"
    after_failure = True

    async def sync(self, kube: KubeAPI, current: Round) -> Round:
        if current.workload is None:
            return current
        told: list[Event] = []
        dropped: list[str] = []
        try:
            condition = await _handle(kube, current, told, dropped)
        except ApiException as error:
            return dataclasses.replace(current, events=current.events + tuple(told),
                                       dropped_annotations=current.dropped_annotations + tuple(dropped),
                                       late_problem=("QuorumRecoveryFailed", api_error_message(error)))
        return dataclasses.replace(current, events=current.events + tuple(told),
                                   dropped_annotations=current.dropped_annotations + tuple(dropped),
                                   conditions=current.conditions + (condition,))


async def _handle(kube: KubeAPI, current: Round, told: list[Event], dropped: list[str]) -> Condition:
    """One round of quorum-loss handling: the QuorumLost condition for the status; the Events to post
    and the annotations to drop are added to `told` and `dropped` as they happen."""
    cluster, body, workload, now = current.cluster, current.body, current.workload, current.now
    record = parse_record(_annotations(workload).get(contract.ANNOTATION_QUORUM_RECOVERY))
    view = quorum_loss.with_record(quorum_loss.QuorumView(
        cluster=cluster.name, kind_short=cluster.engine.short_name, replicas=cluster.replicas,
        kept=current.plan.kept, raft=current.raft, heartbeats=current.heartbeats,
        request=_annotations(body).get(contract.ANNOTATION_RECOVER_QUORUM) or None,
        policy=cluster.recovery.quorum_loss, grace_seconds=cluster.recovery.grace_seconds,
        lost_since=quorum_loss.lost_since(current.previous), record=None,
        force_supported=cluster.engine.capabilities.force_new_cluster, now=now, new_id=uuid.uuid4().hex[:8],
        previous=quorum_loss.previous_condition(current.previous),
    ), record)
    decision = quorum_loss.decide(view)
    backend = cluster.backend
    if decision.start is not None:
        # The round's workload is a watch cache's copy, which a recovery recorded a moment ago may
        # not have reached: a start acts on the workload read now, and is written on that version only.
        live = await kube.get(backend.api_version, backend.kind, cluster.namespace, cluster.name)
        if live is None:  # deleted since the round's copy: nothing to record a recovery on
            return Condition(quorum_loss.CONDITION, None, "WorkloadGone",
                             f"{backend.kind} {cluster.name} is not there any more: no recovery starts")
        running = parse_record(_annotations(live).get(contract.ANNOTATION_QUORUM_RECOVERY))
        if running is not None:
            record = running
            decision = quorum_loss.decide(quorum_loss.with_record(view, running))
        else:
            await kube.merge_patch(backend.api_version, backend.kind, cluster.namespace, cluster.name,
                                   {"metadata": {"resourceVersion": live["metadata"].get("resourceVersion"),
                                                 "annotations": {
                                                     contract.ANNOTATION_QUORUM_RECOVERY: decision.start.to_json()}}})
            record = decision.start
    if decision.announce is not None and record is not None:
        await kube.apply(started_event(body, record, decision.announce, now))
    if decision.finish:
        await kube.merge_patch(backend.api_version, backend.kind, cluster.namespace, cluster.name,
                               {"metadata": {"annotations": {contract.ANNOTATION_QUORUM_RECOVERY: None}}})
        record = None
    if decision.drop_request:
        dropped.append(contract.ANNOTATION_RECOVER_QUORUM)
    told.extend((*decision.events, *quorum_loss.announcements(current.previous, decision.condition)))
    if record is not None:
        pods = await kube.list("v1", "Pod", cluster.namespace, contract.label_selector(cluster.name))
        for pod in quorum_loss.restart(pods, record):
            await kube.delete("v1", "Pod", cluster.namespace, pod.name, uid=pod.uid)
            told.append(Event("Normal", "QuorumRecoveryRestart",
                              f"recovery {record.id}: {pod.name} restarts so that its sidecar reads the recovery"))
    return decision.condition


def started_event(body: Mapping[str, Any], record: QuorumLossRecord, event: Event, now: datetime) -> dict[str, Any]:
    """The quorum-loss recovery's start Event, named after the recovery: applied twice, still one."""
    return named_event(body, f"{body['metadata']['name']}.quorum-recovery-{record.id}", event, now)
