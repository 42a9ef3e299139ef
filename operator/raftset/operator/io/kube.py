"""The operator's few Kubernetes API calls, kept apart from every decision.

The calls go through the official client's asyncio module (`kubernetes.aio`, on aiohttp) on kopf's
event loop: one client session for the process, whose connection pool
keeps at most `CONNECTIONS` connections to the apiserver alive, and as many calls in flight, the most
urgent reconcile's first (`raftset.operator.io.apiorder`). Writes are server-side apply with one field
manager, so a repeated apply of the same manifest is a no-op and someone else's edits to our fields
are taken back.

Errors leave as the official client's `ApiException`, the one type the components, the election and
the kubectl plugin catch.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

import aiohttp
import kubernetes.aio.client
import kubernetes.aio.config
from kubernetes import client, config
from kubernetes.aio.client.rest import ApiException as AsyncApiException
from kubernetes.aio.dynamic import DynamicClient
from kubernetes.aio.dynamic.exceptions import ConflictError, NotFoundError, ResourceNotFoundError
from kubernetes.client.exceptions import ApiException

from raftset.operator.io import apiorder

FIELD_MANAGER = "raftset-operator"
# Calls in flight, and so connections kept: more only queue inside the apiserver (a spec change's call
# would then wait behind them there), fewer leave the apiserver's round trips unused.
CONNECTIONS = 16
# A call the apiserver has not answered by then gives up, as an ApiException (status 0): a hung
# connection would otherwise hold its reconcile, and the cluster's next ones, for the client's 5 minutes.
REQUEST_TIMEOUT_S = 30.0
T = TypeVar("T")


def load_config() -> client.ApiClient:
    """The synchronous client, for what runs before kopf's loop or beside it (the startup probes of
    raftset.operator.watches, the leader election): in-cluster credentials in a pod, else $KUBECONFIG."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


async def connect() -> KubeClient:
    """The process's one client session: in-cluster credentials in a pod, else $KUBECONFIG."""
    configuration = kubernetes.aio.client.Configuration()
    try:
        kubernetes.aio.config.load_incluster_config(client_configuration=configuration)
    except kubernetes.aio.config.ConfigException:
        await kubernetes.aio.config.load_kube_config(client_configuration=configuration)
    return await session(configuration)


async def session(configuration: kubernetes.aio.client.Configuration) -> KubeClient:
    """A client session on `configuration`, its pool sized to the calls let in flight."""
    configuration.connection_pool_maxsize = CONNECTIONS
    api = kubernetes.aio.client.ApiClient(configuration)
    try:
        return KubeClient(api, await DynamicClient(api))
    except BaseException:
        await api.close()
        raise


def _official(error: AsyncApiException) -> ApiException:
    """The same error as the official client's type."""
    same = ApiException(status=error.status, reason=error.reason)
    body = error.body
    same.body = body.decode(errors="replace") if isinstance(body, bytes) else body
    same.headers = error.headers
    return same


class KubeClient:
    """Thin wrapper over the asynchronous dynamic client (raftset.operator.io.api.KubeAPI)."""

    def __init__(self, api: kubernetes.aio.client.ApiClient, dynamic: DynamicClient) -> None:
        self._api = api
        self._dynamic = dynamic
        # A discovery lookup that misses (or has_api's rediscovery) rebuilds the discovery cache
        # across awaits; a lookup of another reconcile meanwhile would read it half built.
        self._discovery = asyncio.Lock()
        self.gate = apiorder.Gate(CONNECTIONS)

    def watch_client(self, streams: int) -> kubernetes.aio.client.ApiClient:
        """A client of its own for `streams` long-lived watches (io.objectwatch): a watch holds its
        connection for minutes, and in the calls' pool it would leave one slot fewer to every
        reconcile (and, one per namespace of a namespaced operator, could take them all)."""
        configuration = copy.copy(self._api.configuration)
        configuration.connection_pool_maxsize = streams
        return kubernetes.aio.client.ApiClient(configuration)

    async def close(self) -> None:
        await self._api.close()

    async def _call(self, call: Awaitable[T]) -> T:
        """`call`, once the gate lets this reconcile's calls through; its error as the official type."""
        async with self.gate.slot(apiorder.CURRENT.get()):
            try:
                return await call
            except AsyncApiException as error:
                raise _official(error) from None
            except (TimeoutError, aiohttp.ClientError) as error:
                raise ApiException(status=0, reason=f"no answer from the API server: {error!r}") from error

    async def _resource(self, api_version: str, kind: str) -> Any:
        async with self._discovery:
            return await self._dynamic.resources.get(api_version=api_version, kind=kind)

    async def has_api(self, api_version: str, kind: str) -> bool:
        """Is `kind` served now? Asked of the apiserver's discovery document of its group version,
        not of the dynamic client's discovery cache: that cache outlives an uninstalled CRD (it is
        even kept on disk across restarts), and is refreshed here when a CRD has been installed."""
        async def probe() -> bool:
            path = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
            try:
                found = (await self._dynamic.request("GET", path, _request_timeout=REQUEST_TIMEOUT_S)).to_dict()
            except NotFoundError:
                return False
            if not any(r.get("kind") == kind and "/" not in r.get("name", "") for r in found.get("resources") or []):
                return False
            try:
                await self._resource(api_version, kind)
            except ResourceNotFoundError:
                async with self._discovery:
                    await self._dynamic.resources.invalidate_cache()
            return True
        return await self._call(probe())

    async def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        async def call() -> dict[str, Any]:
            meta = manifest["metadata"]
            resource = await self._resource(manifest["apiVersion"], manifest["kind"])
            result = await self._dynamic.server_side_apply(
                resource, body=dict(manifest), name=meta["name"], namespace=meta.get("namespace"),
                field_manager=FIELD_MANAGER, force_conflicts=True, _request_timeout=REQUEST_TIMEOUT_S)
            return dict(result.to_dict())
        return await self._call(call())

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        async def call() -> dict[str, Any] | None:
            resource = await self._resource(api_version, kind)
            try:
                return dict((await self._dynamic.get(resource, name=name, namespace=namespace,
                                                     _request_timeout=REQUEST_TIMEOUT_S)).to_dict())
            except NotFoundError:
                return None
        return await self._call(call())

    async def list(self, api_version: str, kind: str, namespace: str | None, selector: str, *,
                   fields: str = "") -> list[dict[str, Any]]:
        """Objects by label `selector` (and field selector `fields`); namespace None for cluster-scoped kinds."""
        async def call() -> list[dict[str, Any]]:
            resource = await self._resource(api_version, kind)
            found = await self._dynamic.get(resource, namespace=namespace, label_selector=selector,
                                            field_selector=fields or None, _request_timeout=REQUEST_TIMEOUT_S)
            return [item.to_dict() for item in found.items]
        return await self._call(call())

    async def merge_patch(self, api_version: str, kind: str, namespace: str, name: str,
                          patch: Mapping[str, Any], *, subresource: str = "") -> None:
        async def call() -> None:
            resource = await self._resource(api_version, kind)
            try:
                await self._dynamic.patch(getattr(resource, subresource) if subresource else resource,
                                          name=name, namespace=namespace, body=dict(patch),
                                          content_type="application/merge-patch+json",
                                          _request_timeout=REQUEST_TIMEOUT_S)
            except NotFoundError:
                pass
        await self._call(call())

    async def delete(self, api_version: str, kind: str, namespace: str, name: str, *, uid: str = "",
                     grace_seconds: int | None = None) -> None:
        """`uid`: only that incarnation; `grace_seconds` 0: at once, as `kubectl delete --force` (a pod on
        a node whose kubelet will never confirm)."""
        async def call() -> None:
            resource = await self._resource(api_version, kind)
            body: dict[str, Any] = {}
            if uid:
                body["preconditions"] = {"uid": uid}
            if grace_seconds is not None:
                body["gracePeriodSeconds"] = grace_seconds
            try:
                await self._dynamic.delete(resource, name=name, namespace=namespace, body=body or None,
                                           _request_timeout=REQUEST_TIMEOUT_S)
            except NotFoundError:
                pass
            except ConflictError:
                if not uid:
                    raise
                # The precondition failed: the incarnation judged is gone, another holds the name.
        await self._call(call())


def api_error_message(error: ApiException) -> str:
    """The apiserver's own explanation, which names the offending field."""
    try:
        return str(json.loads(error.body).get("message") or error.reason)
    except (TypeError, ValueError):
        return str(error.reason)
