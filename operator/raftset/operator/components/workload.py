"""The workload: a StatefulSet or an Advanced StatefulSet around the pod template.

`workload()` adds the StatefulSet fields both APIs share and lets the `Backend` write the only
part that differs (the scale fields: `replicas`, plus `reserveOrdinals` on OpenKruise). What the
apply returns is the workload the status reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from raftset import contract
from raftset.operator.components.protocol import Applied, Manifest, Round, apply
from raftset.operator.io.api import KubeAPI
from raftset.operator.pure.objects import labels, metadata
from raftset.operator.pure.pod_template import pod_template
from raftset.operator.pure.scale_step import ScaleStep
from raftset.operator.pure.spec import Cluster
from raftset.operator.pure.storage import Claims


def _volume_claim_templates(cluster: Cluster, claims: Claims | None) -> list[dict[str, Any]]:
    if cluster.storage.ephemeral:
        return []
    # Immutable once the workload exists: it keeps the size it was created with, and
    # expansion patches the PVCs (raftset.operator.pure.storage).
    size = claims.template_size if claims else cluster.storage.size
    claim: dict[str, Any] = {
        "metadata": {"name": "data", "labels": labels(cluster, "member")},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
        },
    }
    if cluster.storage.storage_class:
        claim["spec"]["storageClassName"] = cluster.storage.storage_class
    return [claim]



def workload_manifest(cluster: Cluster, replicas: int, reserved: Iterable[int] = (), *,
                      tls_revision: str | None = None, claims: Claims | None = None,
                      scale_step: ScaleStep | None = None) -> dict[str, Any]:
    """The StatefulSet (builtin or Advanced) running `replicas` pods around the `reserved` ordinals.

    `claims` (from the live workload, see raftset.operator.pure.storage) keeps the claim
    template as created and records how far the PVCs were expanded. `scale_step` is the
    step Raft has yet to confirm: written in the same apply as the step, so the record and
    the step never part.
    """
    backend = cluster.backend
    meta = metadata(cluster, cluster.name, "member")
    annotations: dict[str, str] = {}
    if claims is not None and not cluster.storage.ephemeral:
        annotations.update(claims.annotations())
    if scale_step is not None:
        annotations[contract.ANNOTATION_SCALE_STEP] = scale_step.to_json()
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": backend.api_version,
        "kind": backend.kind,
        "metadata": meta,
        "spec": {
            "serviceName": contract.peer_service_name(cluster.name),
            "selector": {"matchLabels": contract.selector_labels(cluster.name)},
            # Members join one at a time through the sidecar, not through pod ordering;
            # Parallel lets a restarted pod come back without waiting for its elders.
            "podManagementPolicy": "Parallel",
            # The operator restarts one member at a time, followers first and the leader
            # last (raftset.operator.pure.rolls); a controller-driven roll would take the
            # highest ordinal first, leader or not.
            "updateStrategy": {"type": "OnDelete"},
            "persistentVolumeClaimRetentionPolicy": {
                "whenScaled": cluster.storage.when_scaled,
                "whenDeleted": cluster.storage.when_deleted,
            },
            "template": pod_template(cluster, tls_revision),
            "volumeClaimTemplates": _volume_claim_templates(cluster, claims),
            **backend.scale_spec(replicas, reserved),
        },
    }



class Workload(Applied):
    name = "workload"

    def render(self, current: Round) -> list[Manifest]:
        plan = current.plan
        return [workload_manifest(current.cluster, plan.replicas, plan.reserved, tls_revision=current.tls_revision,
                                  claims=current.claims, scale_step=plan.record)]

    async def sync(self, kube: KubeAPI, current: Round) -> Round:
        if not current.write:
            return current
        (manifest,) = self.render(current)
        current, answer = await apply(kube, current, manifest, current.workload, read=True)
        return current if answer is None else dataclasses.replace(current, workload=answer)
