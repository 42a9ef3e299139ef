"""The demo clusters `make run` applies, on kwok nodes or on real ones, and the install's grant they need."""

from __future__ import annotations

from raftset import contract

NAME = "demo"
XLINE_NAME = "demo-xline"
# make run's S3 store (versitygw) for spec.backup: its bucket, and the Secret with its keys.
BACKUP_BUCKET = "backups"
BACKUP_SECRET = "s3-credentials"


def cluster(kind: str = contract.KIND_ETCD, name: str = NAME, *, ephemeral: bool = True) -> dict:
    """Three members, plaintext so that the guide's etcdctl needs no client certificate
    (kustomize/samples runs with TLS); on kwok nodes an emptyDir, on real nodes a local volume."""
    return {
        "apiVersion": contract.API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 3,
            "tls": {"provider": "disabled"},
            "storage": {"ephemeral": True} if ephemeral else {"size": "1Gi"},
        },
    }


def secrets_binding(deployment: dict, namespace: str) -> dict:
    """The RoleBinding that lets the operator's ServiceAccount keep the auto provider's Secrets in `namespace`
    (what an admin does for each namespace whose clusters use the auto TLS provider: docs/security.md)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "raftset-operator-secrets", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "raftset-operator-secrets"},
        "subjects": [{"kind": "ServiceAccount", "namespace": deployment["metadata"]["namespace"],
                      "name": deployment["spec"]["template"]["spec"]["serviceAccountName"]}],
    }
