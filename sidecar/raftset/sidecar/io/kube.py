"""The sidecar's few Kubernetes API calls: its pod, its workload, its heartbeat Lease.

Plain REST over aiohttp. In a pod the service-account files are read directly (the
token on every request, so rotation just works); a kubeconfig (tests, `make run`) with
static credentials is read here too. The official client, whose import alone adds 16 MiB
to the sidecar, is imported only for a kubeconfig this module does not understand
(exec plugins, auth providers), so that every kind of credential still works.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import yaml

from raftset import contract
from raftset.workloads import Backend

FIELD_MANAGER = "raftset-sidecar"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
# What from_kubeconfig reads itself; a kubeconfig with any other field goes to the official loader.
STATIC_CLUSTER_FIELDS = frozenset({"server", "certificate-authority", "certificate-authority-data",
                                   "insecure-skip-tls-verify"})
STATIC_USER_FIELDS = frozenset({"token", "tokenFile", "client-certificate", "client-key",
                                "client-certificate-data", "client-key-data"})


class KubeError(Exception):
    def __init__(self, method: str, path: str, status: int, text: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {text[:300]}")
        self.status = status


@dataclass(frozen=True)
class Credentials:
    host: str
    ca_file: str | None
    cert_file: str | None
    key_file: str | None
    verify: bool
    token: Callable[[], str | None]  # the Authorization header value, read per request
    ca_data: str | None = None  # PEM inlined in a kubeconfig, instead of ca_file
    client_pem: tuple[bytes, bytes] | None = None  # certificate and key inlined, instead of the files

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.host.startswith("https"):
            return False
        ctx = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        elif self.client_pem:
            _load_inline_chain(ctx, *self.client_pem)
        return ctx


def _load_inline_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl loads a client certificate from files only: a private directory holds them for the call."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, pem in (("client.crt", cert), ("client.key", key)):
            with open(os.path.join(tmp, name), "wb") as fh:
                fh.write(pem)
        ctx.load_cert_chain(os.path.join(tmp, "client.crt"), os.path.join(tmp, "client.key"))


def in_cluster(root: str = SERVICE_ACCOUNT) -> Credentials:
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    if ":" in host:
        host = f"[{host}]"

    def token() -> str:
        with open(f"{root}/token", encoding="utf-8") as fh:
            return f"Bearer {fh.read().strip()}"
    return Credentials(f"https://{host}:{port}", f"{root}/ca.crt", None, None, True, token)


def from_kubeconfig(path: str | None) -> Credentials:
    """The current context's server, CA and static user credentials, read from the file's YAML."""
    if not path or os.pathsep in path:  # the default location, or a list to merge: the official rules
        return _official_kubeconfig(path)
    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh) or {}
    context = _named(doc, "contexts", doc.get("current-context"))
    cluster = _named(doc, "clusters", context.get("cluster"))
    user = _named(doc, "users", context.get("user")) if context.get("user") else {}
    if set(cluster) - STATIC_CLUSTER_FIELDS or set(user) - STATIC_USER_FIELDS:
        return _official_kubeconfig(path)
    base = os.path.dirname(os.path.abspath(path))

    def file(field: str, fields: Mapping[str, Any]) -> str | None:
        return os.path.join(base, fields[field]) if fields.get(field) else None

    def data(field: str, fields: Mapping[str, Any]) -> bytes | None:
        return base64.b64decode(fields[field]) if fields.get(field) else None

    ca_data = data("certificate-authority-data", cluster)
    cert_data, key_data = data("client-certificate-data", user), data("client-key-data", user)
    token_file = file("tokenFile", user)

    def token() -> str | None:
        if user.get("token"):
            return f"Bearer {user['token']}"
        if token_file:
            with open(token_file, encoding="utf-8") as fh:
                return f"Bearer {fh.read().strip()}"
        return None
    return Credentials(
        cluster["server"], file("certificate-authority", cluster), file("client-certificate", user),
        file("client-key", user), not cluster.get("insecure-skip-tls-verify", False), token,
        ca_data=ca_data.decode("ascii") if ca_data else None,
        client_pem=(cert_data, key_data) if cert_data and key_data else None,
    )


def _named(doc: Mapping[str, Any], section: str, name: str | None) -> dict[str, Any]:
    """The body of `name` in a kubeconfig list (contexts, clusters, users)."""
    for entry in doc.get(section) or []:
        if entry.get("name") == name:
            return dict(entry.get(section[:-1]) or {})
    raise ValueError(f"kubeconfig has no {section[:-1]} named {name!r}")


def _official_kubeconfig(path: str | None) -> Credentials:
    from kubernetes import client as k8s_client  # noqa: PLC0415 - heavy; only what from_kubeconfig cannot read
    from kubernetes import config as k8s_config  # noqa: PLC0415

    cfg = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=path, client_configuration=cfg)

    def token() -> str | None:
        return cfg.get_api_key_with_prefix("authorization") or cfg.get_api_key_with_prefix("BearerToken")
    return Credentials(cfg.host, cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file, bool(cfg.verify_ssl), token)


class SidecarKube:
    """One namespace's worth of API access with the pod's own credentials."""

    def __init__(self, credentials: Credentials, namespace: str, *, timeout: float = 10.0) -> None:
        self._creds = credentials
        self.namespace = namespace
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def load(cls, namespace: str, kubeconfig: str | None = None) -> SidecarKube:
        if kubeconfig or "KUBERNETES_SERVICE_HOST" not in os.environ:
            return cls(from_kubeconfig(kubeconfig), namespace)
        return cls(in_cluster(), namespace)

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
                timeout=self._timeout, connector=aiohttp.TCPConnector(ssl=self._creds.ssl_context()),
            )
        headers = {"Accept": "application/json"}
        token = self._creds.token()
        if token:
            headers["Authorization"] = token
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        url = self._creds.host.rstrip("/") + path + (f"?{urlencode(query)}" if query else "")
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

    async def annotate_pod(self, name: str, annotations: Mapping[str, str | None]) -> None:
        """Merge-patch annotations of a pod of our cluster (our own; the leader's CORRUPT verdict goes on the
        accused member's); None deletes one."""
        await self.request(
            "PATCH", self._ns("v1", "pods", name), {"metadata": {"annotations": dict(annotations)}},
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

    async def claim_lease(self, lease: Mapping[str, Any], claimant: str) -> bool:
        """Server-side apply under the claimant's own field manager, never forced: True when the
        Lease now says what `lease` says, False when another claimant set its fields differently
        (the apiserver's conflict). A create-if-absent on a name the member Role may patch."""
        try:
            await self.request(
                "PATCH", self._ns("coordination.k8s.io/v1", "leases", lease["metadata"]["name"]), lease,
                content_type="application/apply-patch+yaml", query={"fieldManager": f"{FIELD_MANAGER}-{claimant}"},
            )
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def post_event(self, involved: Mapping[str, Any], *, warning: bool, reason: str, message: str,
                         component: str) -> None:
        """One core/v1 Event about `involved` (an object reference), so that kubectl describe shows it.

        `component` (the pod) is the source host: which sidecar acted."""
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{involved.get('name', 'raftset')}.", "namespace": self.namespace},
            "involvedObject": dict(involved),
            "type": "Warning" if warning else "Normal",
            "reason": reason,
            "message": message[:1024],
            "source": {"component": FIELD_MANAGER, "host": component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await self.request("POST", self._ns("v1", "events"), body)

    async def delete_lease(self, name: str) -> None:
        await self.request("DELETE", self._ns("coordination.k8s.io/v1", "leases", name), missing_ok=True)

    async def lease(self, name: str) -> dict[str, Any] | None:
        return await self.request("GET", self._ns("coordination.k8s.io/v1", "leases", name), missing_ok=True)

    async def cluster_object(self, plural: str, name: str) -> dict[str, Any] | None:
        """The EtcdCluster/XlineCluster this pod belongs to (spec.backup, spec.bootstrap): read only."""
        return await self.request("GET", self._ns(contract.API_VERSION, plural, name), missing_ok=True)

