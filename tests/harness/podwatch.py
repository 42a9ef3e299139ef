"""A cluster's pods as one watch stream: every change, in the order the apiserver made it.

A poll on a loaded machine misses a pod that lived a second and can see an effect before its
cause; one stream from a listed resourceVersion does neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client, watch

from raftset import contract
from tests.harness.background import Background


@dataclass(frozen=True)
class PodChange:
    """One change of a member pod as the apiserver's watch sent it, and the leader a test knew of then."""

    name: str
    uid: str
    tls: str  # the TLS revision of the template the pod was created from
    up: bool  # neither terminating nor deleted
    ready: bool
    leader: int | None


class PodWatch(Background):
    """Every change of a cluster's pods, in the order the apiserver made them: one watch stream, so
    a pod that lived a second is seen, and what came first is known (a poll on a loaded machine
    saw a phase's first restart before the template change that caused it)."""

    def __init__(self, core: client.CoreV1Api, namespace: str, cluster: str,
                 leader: Callable[[], int | None] = lambda: None) -> None:
        self.core, self.namespace, self.leader = core, namespace, leader
        self.selector = f"{contract.LABEL_INSTANCE}={cluster}"
        self.changes: list[PodChange] = []
        self.errors: list[str] = []
        super().__init__()

    def __enter__(self) -> PodWatch:
        listed = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector)
        for pod in listed.items:
            self._record("ADDED", pod)
        self._version = listed.metadata.resource_version
        return super().__enter__()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for event in watch.Watch().stream(self.core.list_namespaced_pod, self.namespace,
                                                  label_selector=self.selector, resource_version=self._version,
                                                  timeout_seconds=5):
                    self._version = event["object"].metadata.resource_version
                    self._record(event["type"], event["object"])
            except Exception as error:  # noqa: BLE001 - a gap in the stream: the test fails on it
                self.errors.append(repr(error))
                return

    def _record(self, kind: str, pod: Any) -> None:
        ready = any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
        up = kind != "DELETED" and pod.metadata.deletion_timestamp is None
        tls = (pod.metadata.annotations or {}).get(contract.ANNOTATION_TLS_REVISION, "")
        self.changes.append(PodChange(pod.metadata.name, pod.metadata.uid, tls, up, ready and up,
                                     self.leader()))

    def current(self) -> dict[str, PodChange]:
        """Each pod name's last change."""
        return {change.name: change for change in list(self.changes)}


def deletions(changes: list[PodChange]) -> list[tuple[PodChange, dict[str, PodChange]]]:
    """Each pod incarnation's first change that is not up (its deletion), with every pod's last change before it."""
    state: dict[str, PodChange] = {}
    gone: set[str] = set()
    out = []
    for change in changes:
        if not change.up and change.uid not in gone:
            gone.add(change.uid)
            out.append((change, dict(state)))
        state[change.name] = change
    return out
