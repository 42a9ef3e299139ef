"""The member claims: one list, a merge patch per PVC that is smaller than the accepted size.

The decision (what size, what to report) is pure.storage; this is its shell.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from raftset import contract
from raftset.operator.components.protocol import Owned, Round
from raftset.operator.io.api import KubeAPI
from raftset.operator.pure.storage import Claims, Problem, decide, expanded, recorded_size, to_expand

log = logging.getLogger("raftset.operator.pure.storage")



async def ensure_claims(kube: KubeAPI, cluster: Any, workload: Mapping[str, Any] | None, *,
                        write: bool = True) -> tuple[Claims | None, Problem | None]:
    """Decide (every tick) and, with `write`, patch the member PVCs up to the accepted size.

    `cluster` is a `spec.Cluster`. Returns what the renderer needs and the problem to report.
    """
    if cluster.storage.ephemeral:
        return None, None
    claims, problem = decide(cluster.storage.size, workload)
    if not write or workload is None:
        return claims, problem  # no workload yet: no PVCs, the template has the size
    shrinking = problem is not None and problem[0] == "StorageShrinkRefused"
    target = claims.size if shrinking else cluster.storage.size
    pvcs = await kube.list("v1", "PersistentVolumeClaim", cluster.namespace, contract.label_selector(cluster.name))
    failure = False
    for name in to_expand(cluster.name, pvcs, target):
        try:
            await kube.merge_patch("v1", "PersistentVolumeClaim", cluster.namespace, name,
                                   {"spec": {"resources": {"requests": {"storage": target}}}})
        except ApiException as error:
            log.warning("expanding %s/%s to %s failed: %s", cluster.namespace, name, target, error.body)
            failure = True
            break
    if shrinking:
        return claims, problem
    return expanded(claims.template_size, recorded_size(workload, target), target, failure)


class VolumeClaims(Owned):
    """PVC expansion; the claims' retention follows the workload's policy."""

    name = "claims"

    async def sync(self, kube: KubeAPI, current: Round) -> Round:
        claims, problem = await ensure_claims(kube, current.cluster, current.workload, write=current.write)
        return current.found(problem, claims=claims)
