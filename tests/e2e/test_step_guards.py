"""Issue 30, bugs 2 and 5: a roll's next deletion and a scale-in step wait for evidence gathered now.

Real parts throughout: kube-apiserver, the workload controllers, the operator, the sidecars and
etcd members run by the pod runner. The faults are real too: the apiserver refuses the
re-creation of a rolled pod (a ValidatingAdmissionPolicy), and a member's store is SIGSTOPped
(its process runs, answers nothing) while a scale-in is asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from raftset import contract
from tests.e2e.test_fullstack import FAST, HAND_OFF_DEADLINE_S, assert_writes_flowed, stack
from tests.e2e.test_repair import running_store
from tests.harness.checker import Writer, check
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import Operator, kubectl
from tests.harness.view import ClusterView
from tests.harness.waiting import wait_for
from tools.devcluster.podrunner import PodRunner

pytestmark = pytest.mark.e2e

BACKENDS = ["StatefulSet", "AdvancedStatefulSet"]
# How long pod creation stays refused: several Lease durations (3 x heartbeatIntervalSeconds 2 s)
# and many of the leader's membership publishes, so that no window the old code had is missed.
REFUSED_S = 30.0
# How long a refused scale-in is watched: the operator plans a few rounds meanwhile.
REFUSED_SCALE_S = 20.0


def listed(kv: ClusterView) -> set[str]:
    """The cluster's pods the API lists, terminating ones included."""
    selector = f"{contract.LABEL_INSTANCE}={kv.name}"
    return {p.metadata.name for p in kv.core.list_namespaced_pod(kv.namespace, label_selector=selector).items}


class DownSampler(threading.Thread):
    """Samples, every 0.25 s, which kept ordinals are down: by their pods (missing, terminating
    or not Running) and by the operator's status (a row missing or not healthy)."""

    def __init__(self, kv: ClusterView, ordinals: range) -> None:
        super().__init__(daemon=True)
        self.kv, self.ordinals = kv, ordinals
        self.done = threading.Event()
        self.samples = 0
        self.worst_pods: set[str] = set()
        self.worst_status: set[str] = set()

    def run(self) -> None:
        want = self.kv.pod_names(*self.ordinals)
        while not self.done.wait(0.25):
            try:
                down_pods = want - self.kv.running_pods()
                rows = {r["name"]: r for r in self.kv.status().get("members") or []}
            except Exception:  # noqa: BLE001 - a failed read is no sample
                continue
            down_status = {name for name in want if not (rows.get(name) or {}).get("healthy")}
            self.samples += 1
            if len(down_pods) > len(self.worst_pods):
                self.worst_pods = down_pods
            if len(down_status) > len(self.worst_status):
                self.worst_status = down_status

    def stop(self) -> None:
        self.done.set()
        self.join(10)


@contextlib.contextmanager
def pod_creation_refused(kubeconfig: str, namespace: str, cluster: str) -> Iterator[None]:
    """The apiserver refuses to create the cluster's pods (a ValidatingAdmissionPolicy) until the block ends."""
    name = f"refuse-pods-{namespace}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["pods"]}]},
                 "validations": [{"expression": "false", "message": "pod creation refused by the test"}]},
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {
                     "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                     "objectSelector": {"matchLabels": {contract.LABEL_INSTANCE: cluster}}}},
    }
    probe = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{cluster}-probe", "namespace": namespace,
                          "labels": {contract.LABEL_INSTANCE: cluster}},
             "spec": {"containers": [{"name": "main", "image": "registry.invalid/pause:1"}]}}

    def refused() -> bool:
        done = kubectl(kubeconfig, "create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(probe), check=False)
        return done.returncode != 0 and "pod creation refused by the test" in done.stderr

    kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump_all([policy, binding]))
    try:
        wait_for(refused, 30, "the apiserver refusing the cluster's pods")
        yield
    finally:
        kubectl(kubeconfig, "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name,
                "--ignore-not-found", check=False)
    wait_for(lambda: not refused(), 30, "the apiserver creating the cluster's pods again")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_roll_deletes_no_second_pod_while_the_first_cannot_be_re_created(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, backend: str,
        etcd: EngineUnderTest) -> None:
    """Bug 2: the first rolled pod is deleted and its re-creation refused. Its Lease stays fresh for a
    while and Raft lists it as a voter: only the missing pod says it is gone. At most one member is
    ever down, and the roll completes once pods may be created again."""
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(3, workloadKind=backend, version=etcd.version, storage={"size": "1Gi"}, **FAST)
    kv.wait_healthy(0, 1, 2)
    ids = {m.name: m.id for m in kv.members(0, 1, 2)}
    before = {p.metadata.name: p.metadata.uid for p in kv.pod_objects()}
    sampler = DownSampler(kv, range(3))
    writer = Writer([kv.url(o) for o in (0, 1, 2)], deadline=HAND_OFF_DEADLINE_S)
    sampler.start()
    writer.start()
    try:
        with pod_creation_refused(control_plane.kubeconfig, namespace, "kv"):
            kubectl(control_plane.kubeconfig, "patch", f"etcdclusters/{kv.name}", "-n", namespace, "--type=merge",
                    "-p", json.dumps({"spec": {"options": {"snapshot-count": "20000"}}}))
            first = wait_for(lambda: kv.pod_names(0, 1, 2) - listed(kv), 120,
                             "the first rolled pod deleted and gone")
            (gone,) = first
            ordinal = contract.ordinal_of(gone)
            # The operator planned on it: the roll waits on the missing pod, by name of its ordinal.
            waiting = wait_for(lambda: "to be created and run" in kv.condition("Progressing").get("message", "")
                               and kv.condition("Progressing")["message"], 60, "the roll waiting for the pod")
            print(f"while {gone} cannot be re-created: {waiting}")
            assert f"ordinal {ordinal}" in waiting, waiting
            refused_at = time.monotonic()
            while time.monotonic() - refused_at < REFUSED_S:
                assert listed(kv) == kv.pod_names(0, 1, 2) - {gone}, \
                    "a second pod was deleted while the first could not be re-created"
                time.sleep(0.5)
            reasons = [m for r, m in kv.events() if r == "RollingMember"]
            assert len(reasons) == 1, reasons
        wait_for(lambda: len(kv.pod_objects()) == 3
                 and all(before.get(p.metadata.name) != p.metadata.uid for p in kv.pod_objects()),
                 240, "every pod re-created on the new template")
        kv.wait_healthy(0, 1, 2)
    finally:
        writer.stop()
        sampler.stop()
    print(f"{sampler.samples} samples; most down at once: pods {sorted(sampler.worst_pods)}, "
          f"status {sorted(sampler.worst_status)}")
    assert sampler.samples > 100, "the sampler barely sampled"
    assert len(sampler.worst_pods) <= 1, f"members down at once by their pods: {sorted(sampler.worst_pods)}"
    assert len(sampler.worst_status) <= 1, f"members down at once by status: {sorted(sampler.worst_status)}"
    assert {m.name: m.id for m in kv.members(0, 1, 2)} == ids, "a restart keeps every member"
    assert len([m for r, m in kv.events() if r == "RollingMember"]) == 3
    assert_writes_flowed(writer, at_least=50)
    asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked))


@pytest.mark.parametrize("backend", BACKENDS)
def test_four_voters_with_one_down_keep_quorum_through_a_scale_in(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, backend: str,
        etcd: EngineUnderTest) -> None:
    """Bug 5: 4 voters, kv-1's store stopped, a step to 3. The victim's store may stop before its
    MemberRemove commits, so a healthy victim would leave 2 of 4. The builtin StatefulSet (which can
    only take kv-3) waits, refused, until kv-1 answers again; Advanced takes kv-1 itself. Either way
    the scale-in completes with quorum held and every acknowledged write reads back."""
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    kv.create(4, workloadKind=backend, version=etcd.version, **FAST)
    kv.wait_healthy(0, 1, 2, 3)
    kv.move_leader(0, 0, 1, 2, 3)
    writer = Writer([kv.url(o) for o in (0, 2, 3)])
    writer.start()
    try:
        pid, _ = running_store(runner, namespace, "kv-1")
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(lambda: not next(r for r in kv.status()["members"] if r["name"] == "kv-1")["healthy"], 60,
                     "status showing kv-1 unhealthy")
            kv.scale(3)
            if backend == "StatefulSet":
                refused = wait_for(lambda: kv.condition("Degraded").get("reason") == "ScaleRefused"
                                   and kv.condition("Degraded")["message"], 60, "the scale-in refused")
                print(f"while kv-1 is down: {refused}")
                assert "removing ordinal 3" in refused and "2 healthy of 4 voters" in refused, refused
                watched = time.monotonic()
                while time.monotonic() - watched < REFUSED_SCALE_S:
                    assert kv.pods() == kv.pod_names(0, 1, 2, 3), "a healthy voter went while another was down"
                    time.sleep(0.5)
                assert kv.workload()["spec"]["replicas"] == 4
                written = writer.ok
                wait_for(lambda: writer.ok > written + 20, 30, "writes acknowledged while kv-1 is down")
            else:
                st = kv.wait_healthy(0, 2, 3)
                assert st["reservedOrdinals"] == [1], st
                assert kv.pods() == kv.pod_names(0, 2, 3)
        finally:
            with contextlib.suppress(ProcessLookupError):  # Advanced: its pod, and the store, are gone
                os.kill(pid, signal.SIGCONT)
        kept = (0, 1, 2) if backend == "StatefulSet" else (0, 2, 3)
        kv.wait_healthy(*kept)
    finally:
        writer.stop()
    assert sorted(m.name for m in kv.members(*kept)) == sorted(kv.pod_names(*kept))
    assert writer.failed == 0, f"{writer.failed} writes failed: {writer.errors[-3:]}"
    assert writer.ok > 50, f"the writer barely wrote ({writer.ok})"
    asyncio.run(check([kv.url(o) for o in kept], writer.acked))
