"""One cluster seen through the real API and, where its members run, through etcd itself.

The e2e tier's one view of a cluster: its custom resource, status, workload, pods and
Events; with `member_url` (where the stand-in kubelet runs the members) also MemberList,
the leader and MoveLeader.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import yaml
from kubernetes import client

from raftset import contract, engines
from raftset.sidecar.io.etcdclient import ClientTLS, EtcdClientError, Member, MemberClient
from tests.harness.operator import api, kubectl, wait_for

STEP_TIMEOUT = 90


def cluster_manifest(kind: str, name: str, namespace: str, replicas: int, backend: str | None,
                     **spec: Any) -> dict[str, Any]:
    """A small test cluster: ephemeral storage and plaintext unless `spec` says otherwise."""
    body = {
        "apiVersion": contract.API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "storage": {"ephemeral": True}, "tls": {"provider": "disabled"}, **spec},
    }
    if backend:
        body["spec"]["workloadKind"] = backend
    return body


class ClusterView:
    def __init__(self, kubeconfig: str, kind: str, name: str, namespace: str, backend: str | None = None, *,
                 member_url: Callable[[int], str] | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.api = api(kubeconfig)
        self.kind, self.plural = kind, engines.BY_KIND[kind].plural
        self.name, self.namespace, self.backend = name, namespace, backend
        self.member_url = member_url
        self.tls: ClientTLS | None = None  # the client certificate, once members serve TLS (issued after `create`)
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)

    # ---- the API side

    def create(self, replicas: int, **spec: Any) -> None:
        body = cluster_manifest(self.kind, self.name, self.namespace, replicas, self.backend, **spec)
        kubectl(self.kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(body))

    def obj(self) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(
            contract.GROUP, contract.VERSION, self.namespace, self.plural, self.name)

    def status(self) -> dict[str, Any]:
        return self.obj().get("status") or {}

    def condition(self, kind: str) -> dict[str, Any]:
        return next((c for c in self.status().get("conditions", []) if c["type"] == kind), {})

    def bound_claims(self) -> dict[str, str]:
        """The cluster's Bound data claims and their volumes (the plane's default StorageClass
        provisions them; the stand-in kubelet serves the member's data from the volume)."""
        found = self.core.list_namespaced_persistent_volume_claim(
            self.namespace, label_selector=f"{contract.LABEL_INSTANCE}={self.name}")
        return {c.metadata.name: c.spec.volume_name for c in found.items if c.status.phase == "Bound"}

    def scale(self, replicas: int) -> None:
        kubectl(self.kubeconfig, "scale", f"{self.plural}/{self.name}", f"--replicas={replicas}",
                "-n", self.namespace)

    def workload(self) -> dict[str, Any]:
        backend = self.backend or self.status().get("workloadKind", "StatefulSet")
        group, version = ("apps", "v1") if backend == "StatefulSet" else ("apps.kruise.io", "v1beta1")
        return self.custom.get_namespaced_custom_object(group, version, self.namespace, "statefulsets", self.name)

    def _pods(self) -> list[Any]:
        selector = f"{contract.LABEL_INSTANCE}={self.name}"
        return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def pod_objects(self) -> list[Any]:
        """The cluster's pods that are not terminating, as the API returns them."""
        return [p for p in self._pods() if p.metadata.deletion_timestamp is None]

    def pods(self) -> set[str]:
        return {p.metadata.name for p in self._pods() if p.metadata.deletion_timestamp is None}

    def running_pods(self) -> set[str]:
        return {p.metadata.name for p in self._pods()
                if p.status.phase == "Running" and p.metadata.deletion_timestamp is None}

    def pod_names(self, *ordinals: int) -> set[str]:
        return {contract.pod_name(self.name, o) for o in ordinals}

    def wait_pods(self, *ordinals: int) -> None:
        want = self.pod_names(*ordinals)
        wait_for(lambda: self.pods() == want and self.running_pods() == want, STEP_TIMEOUT,
                 f"pods {sorted(want)} (have {sorted(self.pods())})")

    def wait_settled(self, replicas: int) -> dict[str, Any]:
        last: dict[str, Any] = {}

        def settled() -> dict[str, Any] | None:
            obj = last["obj"] = self.obj()
            st = obj.get("status") or {}
            conds = {c["type"]: c for c in st.get("conditions", [])}
            ok = (st.get("observedGeneration") == obj["metadata"]["generation"]
                  and conds.get("Progressing", {}).get("status") == "False" and len(st.get("members", [])) == replicas)
            return obj if ok else None
        try:
            return wait_for(settled, STEP_TIMEOUT, f"{self.name} settled at {replicas} members")
        except AssertionError as timeout:  # what it waited on: the status it last read
            st = (last.get("obj") or {}).get("status") or {}
            raise AssertionError(f"{timeout}; last status: observedGeneration {st.get('observedGeneration')} of "
                                 f"{(last.get('obj') or {}).get('metadata', {}).get('generation')}, members "
                                 f"{[m.get('name') for m in st.get('members', [])]}, conditions "
                                 f"{[(c['type'], c.get('status'), c.get('message')) for c in st.get('conditions', [])]}"
                                 ) from None

    def events(self) -> list[tuple[str, str]]:
        found = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={self.name},involvedObject.kind={self.kind}")
        return [(e.reason, e.message) for e in found.items]

    # ---- the members themselves

    def url(self, ordinal: int) -> str:
        if self.member_url is None:
            raise AssertionError(f"{self.name}: its members do not run in this test")
        return self.member_url(ordinal)

    def members(self, *ordinals: int) -> list[Member]:
        async def first_answer() -> list[Member]:
            for ordinal in ordinals:
                try:
                    async with MemberClient(self.url(ordinal), self.tls, timeout=3) as c:
                        return await c.member_list()
                except EtcdClientError:
                    continue
            raise AssertionError(f"no member of {ordinals} answered MemberList")
        return asyncio.run(first_answer())

    def leader(self, *ordinals: int) -> int | None:
        async def find() -> int | None:
            for ordinal in ordinals:
                try:
                    async with MemberClient(self.url(ordinal), self.tls, timeout=3) as c:
                        if (await c.status()).is_leader:
                            return ordinal
                except EtcdClientError:
                    continue
            return None
        return asyncio.run(find())

    def raft_term(self, *ordinals: int) -> int:
        """The highest raft term any of these members reports: it moves once per election."""
        async def highest() -> int:
            terms = []
            for ordinal in ordinals:
                try:
                    async with MemberClient(self.url(ordinal), self.tls, timeout=3) as c:
                        terms.append((await c.status()).raft_term)
                except EtcdClientError:
                    continue
            if not terms:
                raise AssertionError(f"no member of {ordinals} answered Status")
            return max(terms)
        return asyncio.run(highest())

    def wait_healthy(self, *ordinals: int) -> dict[str, Any]:
        """Status lists exactly these members, all healthy with a leader, and etcd agrees."""
        want = self.pod_names(*ordinals)

        def healthy() -> dict[str, Any] | None:
            st = self.status()
            members = st.get("members") or []
            ok = ({m["name"] for m in members} == want and all(m["healthy"] for m in members)
                  and st.get("leader") in want and self.pods() == want)
            if not ok:
                return None
            try:
                voting = {m.name for m in self.members(*ordinals) if m.started and not m.is_learner}
            except AssertionError:
                return None  # no member answers yet
            return st if voting == want else None
        return wait_for(healthy, STEP_TIMEOUT, f"members {sorted(want)} healthy with a leader")

    def move_leader(self, ordinal: int, *ordinals: int) -> None:
        async def target_id() -> int:
            async with MemberClient(self.url(ordinal), self.tls, timeout=3) as c:
                return (await c.status()).member_id

        async def move(current: int, target: int) -> None:
            async with MemberClient(self.url(current), self.tls, timeout=5) as c:
                await c.move_leader(target)

        target = asyncio.run(target_id())

        def moved() -> bool:
            current = self.leader(*ordinals)
            if current is not None and current != ordinal:
                asyncio.run(move(current, target))
            return current == ordinal
        wait_for(moved, 30, f"etcd leadership on ordinal {ordinal}", interval=0.5)
        wait_for(lambda: self.status().get("leader") == contract.pod_name(self.name, ordinal), 30,
                 f"status.leader {contract.pod_name(self.name, ordinal)} from the heartbeats")
