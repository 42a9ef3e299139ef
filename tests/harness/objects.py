"""The API writes and reads the k8s tier's tests share: a cluster object as a user applies it, a Lease
as a sidecar renews it, a condition as a tool reads it."""

from __future__ import annotations

from typing import Any

import yaml
from kubernetes import client

from raftset import contract
from tests.harness.operator import kubectl


def create(kubeconfig: str, kind: str, name: str, namespace: str, **spec: Any) -> None:
    body = {"apiVersion": contract.API_VERSION, "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 3, "tls": {"provider": "disabled"}, **spec}}
    kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(body))


def apply_lease(leases: client.CoordinationV1Api, namespace: str, body: dict[str, Any]) -> None:
    """Created, or replaced as a sidecar's renewal would: a new resourceVersion the operator sees."""
    name = body["metadata"]["name"]
    try:
        current = leases.read_namespaced_lease(name, namespace)
    except client.ApiException as error:
        if error.status != 404:
            raise
        leases.create_namespaced_lease(namespace, body)
        return
    body["metadata"]["resourceVersion"] = current.metadata.resource_version
    leases.replace_namespaced_lease(name, namespace, body)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind), {})
