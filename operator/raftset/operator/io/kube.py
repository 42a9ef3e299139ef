"""The operator's few Kubernetes API calls, kept apart from every decision.

The official client is synchronous; calls run in worker threads so kopf's event loop
never blocks, at most `API_WORKERS` at once, the most urgent reconcile's first
(`raftset.operator.io.apiorder`). Writes are server-side apply with one field manager, so a repeated apply
of the same manifest is a no-op and someone else's edits to our fields are taken back.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from raftset.operator.io import apiorder

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

FIELD_MANAGER = "raftset-operator"
API_WORKERS = 6  # threads (and so calls in flight); asyncio's default pool on a 2-core machine
T = TypeVar("T")


def load_config() -> client.ApiClient:
    """In-cluster credentials when running in a pod, else $KUBECONFIG / ~/.kube/config."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


class KubeClient:
    """Thin async wrapper over the dynamic client."""

    def __init__(self, api: client.ApiClient) -> None:
        self._dynamic = DynamicClient(api)
        # The dynamic client's discovery cache is not thread-safe: a lookup that misses (or
        # has_api's rediscovery) rebuilds it, and a concurrent lookup in another worker
        # thread then fails with KeyError('resources'), failing that reconcile.
        self._discovery = threading.Lock()
        self._pool = ThreadPoolExecutor(API_WORKERS, thread_name_prefix="kube")
        self.gate = apiorder.Gate(API_WORKERS)

    async def _call(self, call: Callable[[], T]) -> T:
        """`call` in a worker thread, once the gate lets this reconcile's calls through."""
        async with self.gate.slot(apiorder.CURRENT.get()):
            return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def _resource(self, api_version: str, kind: str) -> Any:
        with self._discovery:
            return self._dynamic.resources.get(api_version=api_version, kind=kind)

    async def has_api(self, api_version: str, kind: str) -> bool:
        """Is `kind` served now? Asked of the apiserver's discovery document of its group version,
        not of the dynamic client's discovery cache: that cache outlives an uninstalled CRD (it is
        even kept on disk across restarts), and is refreshed here when a CRD has been installed."""
        def probe() -> bool:
            path = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
            try:
                found = self._dynamic.request("GET", path).to_dict()
            except ApiException as error:
                if error.status == 404:
                    return False
                raise
            if not any(r.get("kind") == kind and "/" not in r.get("name", "") for r in found.get("resources") or []):
                return False
            try:
                self._resource(api_version, kind)
            except ResourceNotFoundError:
                with self._discovery:
                    self._dynamic.resources.invalidate_cache()
            return True
        return await self._call(probe)

    async def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        def call() -> dict[str, Any]:
            meta = manifest["metadata"]
            resource = self._resource(manifest["apiVersion"], manifest["kind"])
            result = resource.server_side_apply(
                body=dict(manifest), name=meta["name"], namespace=meta.get("namespace"),
                field_manager=FIELD_MANAGER, force_conflicts=True)
            return result.to_dict()
        return await self._call(call)

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        def call() -> dict[str, Any] | None:
            try:
                return self._resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
            except NotFoundError:
                return None
        return await self._call(call)

    async def list(self, api_version: str, kind: str, namespace: str | None, selector: str, *,
                   fields: str = "") -> list[dict[str, Any]]:
        """Objects by label `selector` (and field selector `fields`); namespace None for cluster-scoped kinds."""
        def call() -> list[dict[str, Any]]:
            found = self._resource(api_version, kind).get(namespace=namespace, label_selector=selector,
                                                          field_selector=fields or None)
            return [item.to_dict() for item in found.items]
        return await self._call(call)

    async def merge_patch(self, api_version: str, kind: str, namespace: str, name: str,
                          patch: Mapping[str, Any], *, subresource: str = "") -> None:
        def call() -> None:
            resource = self._resource(api_version, kind)
            try:
                (getattr(resource, subresource) if subresource else resource).patch(
                    name=name, namespace=namespace, body=dict(patch),
                    content_type="application/merge-patch+json")
            except NotFoundError:
                pass
        await self._call(call)

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        def call() -> None:
            try:
                self._resource(api_version, kind).delete(name=name, namespace=namespace)
            except NotFoundError:
                pass
        await self._call(call)


def api_error_message(error: ApiException) -> str:
    """The apiserver's own explanation, which names the offending field."""
    try:
        return str(json.loads(error.body).get("message") or error.reason)
    except (TypeError, ValueError):
        return str(error.reason)
