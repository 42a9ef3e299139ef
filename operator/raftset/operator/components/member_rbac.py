"""What a member's sidecar may do: its ServiceAccount, Role and RoleBinding."""

from __future__ import annotations

from typing import Any

from raftset import contract
from raftset.operator.components.protocol import Applied, Manifest, Round
from raftset.operator.pure.objects import member_service_account, metadata
from raftset.operator.pure.spec import Cluster


def member_rbac(cluster: Cluster, ordinals: int = 0) -> list[dict[str, Any]]:
    """What a member's sidecar may do, by name wherever RBAC can say it.

    Its heartbeat Lease and, when it leads, the cluster's membership Lease (server-side apply that creates an object is authorized as
    `create` of that name, so `resourceNames` bounds it; a plain POST has no name and is
    refused), its pod's role label, a read of its workload, and a list of the cluster's
    Leases for membership-clean.
    The names cover ordinals 0..max(contract.NAMED_ORDINALS, `ordinals`)-1 so that a pod being
    scaled away keeps its rights while it leaves. RBAC cannot tell one member of a cluster
    from another: docs/security.md says what that leaves open.
    """
    sa = member_service_account(cluster)
    backend = cluster.backend
    pods = [contract.pod_name(cluster.name, o) for o in range(max(contract.NAMED_ORDINALS, ordinals))]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(cluster, sa, "member"),
        "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": [contract.lease_name(p) for p in pods]
             + [contract.membership_lease_name(cluster.name), contract.backup_lease_name(cluster.name),
                contract.restore_lease_name(cluster.name)],
             "verbs": ["get", "create", "update", "patch", "delete"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]},
            # The leader's sidecar narrates compaction, defragmentation and alarms.
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["pods"], "resourceNames": pods, "verbs": ["get", "patch"]},
            {"apiGroups": [backend.group], "resources": [backend.plural],
             "resourceNames": [cluster.name], "verbs": ["get"]},
            # spec.backup and spec.bootstrap are read there. Read only: a member that could patch
            # its cluster object could change its spec (image, replicas, options) for every member;
            # the operator moves a backup-now request to the backup Lease (docs/security.md).
            {"apiGroups": [contract.GROUP], "resources": [cluster.engine.plural],
             "resourceNames": [cluster.name], "verbs": ["get"]},
        ],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(cluster, sa, "member")},
        role,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(cluster, sa, "member"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": cluster.namespace}],
        },
    ]



class MemberRBAC(Applied):
    name = "member-rbac"

    def render(self, current: Round) -> list[Manifest]:
        return member_rbac(current.cluster, current.plan.replicas + len(current.plan.reserved))
