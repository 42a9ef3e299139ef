"""The API calls of the plugin (the imperative shell): reads return plain dicts, writes are annotations
and one create. Nothing here decides anything."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from raftset import contract, engines
from raftset.engines import Engine


class NotFound(Exception):
    """The object asked for does not exist (exit code 3)."""


class UsageError(Exception):
    """A kind the plugin does not know, or a name both kinds have: --kind must say which (exit code 2)."""


def engine_of(kind: str) -> Engine:
    """--kind as a user types it: EtcdCluster, etcdcluster(s), etcdc, etcd; XlineCluster, xc, xline."""
    wanted = kind.lower()
    for engine in engines.BY_KIND.values():
        if wanted in (engine.kind.lower(), engine.plural, engine.plural.rstrip("s"), engine.short_name, engine.name):
            return engine
    raise UsageError(f"unknown kind {kind!r}: EtcdCluster (etcdc) or XlineCluster (xc)")


@dataclass
class Api:
    api: client.ApiClient
    namespace: str

    @classmethod
    def connect(cls, kubeconfig: str | None, context: str | None, namespace: str | None) -> Api:
        """kubectl's configuration (KUBECONFIG, --kubeconfig, --context); in a pod without one, the pod's."""
        try:
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
            chosen = next((c for c in contexts if c["name"] == context), None) if context else active
            current = ((chosen or {}).get("context") or {}).get("namespace")
            config.load_kube_config(config_file=kubeconfig, context=context)
        except config.ConfigException as exc:
            if kubeconfig or context:
                raise  # what was named is wrong: say so, not that this is no pod
            try:
                config.load_incluster_config()
            except config.ConfigException:
                raise exc from None
            current = None
        return cls(client.ApiClient(), namespace or current or "default")

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def plain(self, obj: Any) -> Any:
        """A client model as the API's own JSON (camelCase dicts)."""
        return self.api.sanitize_for_serialization(obj)

    def cluster(self, name: str, kind: str | None) -> tuple[Engine, dict[str, Any]]:
        """The cluster `name` of `kind`, or of whichever kind has it."""
        candidates = [engine_of(kind)] if kind else list(engines.BY_KIND.values())
        found = []
        for engine in candidates:
            try:
                found.append((engine, self.custom.get_namespaced_custom_object(
                    contract.GROUP, contract.VERSION, self.namespace, engine.plural, name)))
            except ApiException as exc:
                if exc.status != 404:
                    raise
        if not found:
            kinds = " or ".join(e.kind for e in candidates)
            raise NotFound(f"no {kinds} {self.namespace}/{name}")
        if len(found) > 1:
            raise UsageError(f"both an EtcdCluster and an XlineCluster are named {name}: say which with --kind")
        return found[0]

    def annotate_cluster(self, engine: Engine, name: str, annotations: dict[str, str | None]) -> None:
        self.custom.patch_namespaced_custom_object(contract.GROUP, contract.VERSION, self.namespace, engine.plural,
                                                  name, {"metadata": {"annotations": annotations}})

    def create_cluster(self, engine: Engine, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.custom.create_namespaced_custom_object(contract.GROUP, contract.VERSION, self.namespace,
                                                               engine.plural, body)
        except ApiException as exc:
            if exc.status == 409:
                raise FileExistsError(f"{engine.kind} {self.namespace}/{body['metadata']['name']} exists already") \
                    from exc
            raise

    def pod(self, name: str) -> dict[str, Any]:
        try:
            return self.plain(self.core.read_namespaced_pod(name, self.namespace))
        except ApiException as exc:
            if exc.status == 404:
                raise NotFound(f"no pod {self.namespace}/{name}") from exc
            raise

    def annotate_pod(self, name: str, annotations: dict[str, str | None]) -> None:
        self.core.patch_namespaced_pod(name, self.namespace, {"metadata": {"annotations": annotations}})

    def nodes(self, cluster: str) -> dict[str, str]:
        """Each member pod's node."""
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=contract.label_selector(cluster)).items
        return {p.metadata.name: p.spec.node_name or "" for p in pods}

    def events(self, cluster: str) -> list[dict[str, Any]]:
        """The Events of the cluster object and of its member pods."""
        listed = self.plain(self.core.list_namespaced_event(self.namespace).items)
        return [e for e in listed if (e.get("involvedObject") or {}).get("name") == cluster
                or contract.member_ordinal(cluster, str((e.get("involvedObject") or {}).get("name"))) is not None]

    def leases(self, selector: str = "") -> list[dict[str, Any]]:
        return self.plain(client.CoordinationV1Api(self.api).list_namespaced_lease(
            self.namespace, label_selector=selector).items)

    def secret(self, name: str) -> dict[str, str]:
        try:
            data = self.core.read_namespaced_secret(name, self.namespace).data or {}
        except ApiException as exc:
            if exc.status == 404:
                raise NotFound(f"no Secret {self.namespace}/{name} (the bucket's credentials)") from exc
            raise
        return {k: base64.b64decode(v).decode() for k, v in data.items()}
