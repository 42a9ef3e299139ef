"""Every object the operator owns or writes for a cluster, as one component each, in the order a round walks them.

Backup requests first (they wait for nothing); TLS material and claims next, because pods must
find their Secrets and sizes; then the pod marks, the member RBAC, the Services, the
PodDisruptionBudget (which leaves a scale-in step's victim out first), the scale-in step's guard on
the pods read after it, the workload and, on a roll, the one pod that restarts; a member lost with its node; the quorum-loss
writes last, on the workload the round settled. Each component renders from plain data and writes
through the `KubeAPI` protocol; whether a round writes at all is decided once, by
`OperatorSettings.write_due`.
"""

from __future__ import annotations

import dataclasses

from kubernetes.client.exceptions import ApiException

from raftset.operator.components.backup_requests import BackupRequests
from raftset.operator.components.claims import VolumeClaims
from raftset.operator.components.disruption_budget import DisruptionBudget, ScaleInGuard
from raftset.operator.components.leases import HeartbeatLeases
from raftset.operator.components.member_rbac import MemberRBAC
from raftset.operator.components.node_loss import NodeLoss
from raftset.operator.components.pod_marks import PodMarks
from raftset.operator.components.pod_restarts import PodRestarts
from raftset.operator.components.protocol import Applied, Component, Manifest, Round
from raftset.operator.components.quorum_loss import QuorumLoss
from raftset.operator.components.services import Services
from raftset.operator.components.tls import TLSMaterial
from raftset.operator.components.workload import Workload
from raftset.operator.io.api import KubeAPI
from raftset.operator.io.kube import api_error_message

COMPONENTS: tuple[Component, ...] = (
    BackupRequests(),
    TLSMaterial(),
    VolumeClaims(),
    PodMarks(),
    MemberRBAC(),
    Services(),
    DisruptionBudget(),
    ScaleInGuard(),
    Workload(),
    PodRestarts(),
    HeartbeatLeases(),
    NodeLoss(),
    QuorumLoss(),
)


def rendered(current: Round) -> list[Manifest]:
    """Everything a writing round applies, in apply order (TLS material aside: it depends on what is stored)."""
    return [manifest for component in COMPONENTS if isinstance(component, Applied)
            for manifest in component.render(current)]


async def walk(kube: KubeAPI, current: Round) -> tuple[Round, bool]:
    """The components in order; the round they leave and whether a write failed. A failed write stops the
    walk but for the components that do not depend on the others' writes (`after_failure`)."""
    failed = False
    for component in COMPONENTS:
        if failed and not component.after_failure:
            continue
        try:
            current = await component.sync(kube, current)
        except ApiException as error:
            # Announced once through the Degraded condition, not on every round.
            current = dataclasses.replace(current, problem=("ApplyFailed", api_error_message(error)))
            failed = True
    return current, failed
