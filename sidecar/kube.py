"""The sidecar's few Kubernetes API calls: its pod, its workload, its heartbeat Lease.

Plain REST over aiohttp (the official client is synchronous); credentials come from the
official loader, so kubeconfig files and in-cluster service accounts both work.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from raftset import contract
from raftset.workloads import Backend

FIELD_MANAGER = "raftset-sidecar"


class KubeError(Exception):
    def __init__(self, method: str, path: str, status: int, text: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {text[:300]}")
        self.status = status


class Kube:
    """One namespace's worth of API access with the pod's own credentials."""

    def __init__(self, configuration: k8s_client.Configuration, namespace: str, *, timeout: float = 10.0) -> None:
        self._cfg = configuration
        self.namespace = namespace
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def load(cls, namespace: str, kubeconfig: str | None = None) -> Kube:
        cfg = k8s_client.Configuration()
        if kubeconfig:
            k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        else:
            try:
                k8s_config.load_incluster_config(client_configuration=cfg)
            except k8s_config.ConfigException:
                k8s_config.load_kube_config(client_configuration=cfg)
        return cls(cfg, namespace)

    def _ssl(self) -> ssl.SSLContext | bool:
        if not self._cfg.host.startswith("https"):
            return False
        ctx = ssl.create_default_context(cafile=self._cfg.ssl_ca_cert) if self._cfg.ssl_ca_cert else (
            ssl.create_default_context())
        if not self._cfg.verify_ssl:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self._cfg.cert_file:
            ctx.load_cert_chain(self._cfg.cert_file, self._cfg.key_file)
        return ctx

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
        query: Mapping[str, str] | None = None, missing_ok: bool = False,
    ) -> dict[str, Any] | None:
        """One API call; None for 404 when `missing_ok`, KubeError for anything else not 2xx."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout, connector=aiohttp.TCPConnector(ssl=self._ssl()),
            )
        headers = {"Accept": "application/json"}
        # Calling this re-reads a rotated service-account token through the loader's hook.
        token = self._cfg.get_api_key_with_prefix("authorization") or self._cfg.get_api_key_with_prefix(
            "BearerToken")
        if token:
            headers["Authorization"] = token
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        url = self._cfg.host.rstrip("/") + path + (f"?{urlencode(query)}" if query else "")
        async with self._session.request(method, url, data=data, headers=headers) as resp:
            text = await resp.text()
            if resp.status == 404 and missing_ok:
                return None
            if resp.status >= 300:
                raise KubeError(method, path, resp.status, text)
            return json.loads(text) if text else {}

    def _ns(self, group_version: str, plural: str, name: str = "") -> str:
        root = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        tail = f"/{quote(name)}" if name else ""
        return f"{root}/namespaces/{quote(self.namespace)}/{plural}{tail}"

    async def pod(self, name: str) -> dict[str, Any] | None:
        return await self.request("GET", self._ns("v1", "pods", name), missing_ok=True)

    async def label_pod(self, name: str, labels: Mapping[str, str]) -> None:
        await self.request(
            "PATCH", self._ns("v1", "pods", name), {"metadata": {"labels": dict(labels)}},
            content_type="application/merge-patch+json", missing_ok=True,
        )

    async def workload(self, backend: Backend, name: str) -> dict[str, Any] | None:
        return await self.request("GET", self._ns(backend.api_version, backend.plural, name), missing_ok=True)

    async def member_leases(self, cluster: str) -> list[dict[str, Any]]:
        labels = {**contract.selector_labels(cluster), contract.LABEL_HEARTBEAT: "true"}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        out = await self.request(
            "GET", self._ns("coordination.k8s.io/v1", "leases"), query={"labelSelector": selector},
        )
        return list((out or {}).get("items") or [])

    async def apply_lease(self, lease: Mapping[str, Any]) -> None:
        """Server-side apply: one call creates or renews, and only our fields are ours."""
        await self.request(
            "PATCH", self._ns("coordination.k8s.io/v1", "leases", lease["metadata"]["name"]), lease,
            content_type="application/apply-patch+yaml", query={"fieldManager": FIELD_MANAGER, "force": "true"},
        )

    async def delete_lease(self, name: str) -> None:
        await self.request("DELETE", self._ns("coordination.k8s.io/v1", "leases", name), missing_ok=True)
