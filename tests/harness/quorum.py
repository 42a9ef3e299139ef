"""Quorum loss on a Lab: lose members with their data, read the survivors as the operator
would, record a recovery on the workload as the operator does, and measure what came back;
through the whole stack (a ClusterView), wait for the operator's recovery to end and check it.
"""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone

from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from raftset import contract
from raftset.sidecar.io.etcdclient import MemberClient
from raftset.operator.pure import heartbeats
from raftset.quorum_loss import QuorumLossRecord, Survivor
from tests.harness.checker import PREFIX, Ack, Verdict, Writer, check
from tests.harness.lab import Lab
from tests.harness.view import ClusterView
from tools.devcluster.podrunner import PodRunner
from tests.harness.waiting import await_for, wait_for


def lose(lab: Lab, *ordinals: int) -> None:
    """These members are gone for good: SIGKILLed, their volumes destroyed."""
    for ordinal in ordinals:
        pod = lab.pod(ordinal)
        pod.kill()
        shutil.rmtree(pod.data_dir.parent, ignore_errors=True)


def survivors(lab: Lab, *ordinals: int) -> list[Survivor]:
    """The survivors as their heartbeat Leases publish them once they know there is no leader,
    read with the operator's own parser (raftset.operator.pure.heartbeats)."""
    serialize = k8s.ApiClient().sanitize_for_serialization

    def read() -> list[Survivor] | None:
        leases = lab.leases()
        out = []
        for ordinal in ordinals:
            lease = leases.get(lab.pod(ordinal).name)
            beat = heartbeats.from_lease(serialize(lease)) if lease is not None else None
            if beat is None or beat.healthy:
                return None  # none yet, or written before the loss: wait for the write that says so
            out.append(Survivor(pod=beat.pod, ordinal=ordinal, member_id=beat.member_id, committed=beat.raft_index,
                                term=beat.raft_term, applied=beat.applied_index))
        return out
    return wait_for(read, 60, f"heartbeats of {ordinals} without a leader")


def record_recovery(lab: Lab, survivor: Survivor, requested: str = contract.RECOVER_QUORUM_AUTO) -> QuorumLossRecord:
    """What the operator writes on the workload when a recovery starts."""
    record = QuorumLossRecord(id=uuid.uuid4().hex[:8], survivor=survivor.pod, member_id=survivor.member_id,
                            started=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), requested=requested,
                            term=survivor.term)
    patch = {"metadata": {"annotations": {contract.ANNOTATION_QUORUM_RECOVERY: record.to_json()}}}
    lab.apps.patch_namespaced_stateful_set(lab.cluster, lab.namespace, patch)
    return record


def end_recovery(lab: Lab) -> None:
    patch = {"metadata": {"annotations": {contract.ANNOTATION_QUORUM_RECOVERY: None}}}
    lab.apps.patch_namespaced_stateful_set(lab.cluster, lab.namespace, patch)


async def frozen_revision(lab: Lab, ordinal: int) -> int:
    """The revision a member without quorum holds: applied caught up with committed, read locally."""
    async def settled() -> int | None:
        st = await lab.status(ordinal)
        if st.raft_applied_index < st.raft_index:
            return None
        async with MemberClient(lab.pod(ordinal).client_url, lab.client_tls(), timeout=3) as c:
            revision, _ = await c.get_prefix(PREFIX, serializable=True)
        return revision
    return await await_for(settled, 30, f"ordinal {ordinal} applied what it committed")


def lost_by_revision(acked: dict[str, Ack], survivor_revision: int) -> dict[str, Ack]:
    """The acknowledged writes above what the survivor held: what a forced restart cannot keep."""
    return {k: a for k, a in acked.items() if a.revision > survivor_revision}


@dataclass
class Clock:
    """Monotonic marks of one recovery, for the RTO the tests print and docs/operations.md records."""

    lost: float = 0.0
    started: float = 0.0
    writable: float = 0.0
    full: float = 0.0

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def report(self, label: str, lost_writes: int, acked: int) -> str:
        return (f"{label}: recovery start -> writable {self.writable - self.started:.1f} s, "
                f"-> full size {self.full - self.started:.1f} s; acknowledged writes lost {lost_writes} of {acked}")


def recovered(kv: ClusterView, writer: Writer, acked_at_loss: int, since: float) -> tuple[float, float]:
    """The operator's recovery of a 3-member cluster to its end: writes accepted again, every member
    voting (QuorumLost reason Recovered), the writer writing on the grown cluster. Seconds from
    `since` (time.monotonic) to writable and to 3 voters."""
    wait_for(lambda: writer.ok > acked_at_loss, 240, "writes accepted again")
    writable = time.monotonic() - since
    wait_for(lambda: kv.condition("QuorumLost").get("reason") == "Recovered", 300, "every member votes again")
    kv.wait_healthy(0, 1, 2)
    full = time.monotonic() - since
    written = writer.ok
    wait_for(lambda: writer.ok > written + 50, 60, "the writer writing on the grown cluster")
    return writable, full


def survivor_kept(kv: ClusterView, writer: Writer, survivor_id: int) -> Verdict:
    """Three voters around the survivor's own member, and every acknowledged write read back (the
    writer stopped)."""
    members = {m.name: m.id for m in kv.members(0, 1, 2) if m.started and not m.is_learner}
    assert members.get("kv-0") == survivor_id and len(members) == 3, members
    verdict = asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked))
    assert verdict.acknowledged == len(writer.acked) > 100
    return verdict


def survivor_writing(kv: ClusterView, backend: str, version: str, recovery: dict[str, Any],
                     **spec: Any) -> tuple[int, Writer]:
    """A healthy 3-member cluster and a running writer on kv-0 only, the survivor to be: a put it
    answered is applied in its own log, so no acknowledged write can be lost however the loss
    falls (tests/etcd/test_quorum_loss.py). kv-0's member id and the writer."""
    kv.create(3, workloadKind=backend, version=version, storage={"size": "1Gi"}, recovery=recovery, **spec)
    kv.wait_healthy(0, 1, 2)
    survivor_id = next(m.id for m in kv.members(0, 1, 2) if m.name == "kv-0")
    writer = Writer([kv.url(0)])
    writer.start()
    try:
        wait_for(lambda: writer.ok > 100, 60, "the writer running")
    except AssertionError:
        writer.stop()
        raise
    return survivor_id, writer


def lose_majority(kv: ClusterView, runner: PodRunner) -> None:
    """kv-1 and kv-2 at once: their nodes and disks are gone (the pod runner loses them)."""
    core = k8s.CoreV1Api(kv.api)
    for name in ("kv-1", "kv-2"):
        core.delete_namespaced_pod(name, kv.namespace)
        runner.lose(kv.namespace, name)


@contextmanager
def lease_writes_refused(api: k8s.ApiClient, namespace: str, pods: Sequence[str]) -> Iterator[None]:
    """While the block runs, the API refuses every write of these pods' heartbeat Leases (a
    ValidatingAdmissionPolicy, as in issue 30's live reproduction): their sidecars cannot write to the
    API while pod-to-pod traffic flows. Entered once a dry-run write is refused, left once one passes."""
    admission = k8s.AdmissionregistrationV1Api(api)
    leases = k8s.CoordinationV1Api(api)
    names = [contract.lease_name(p) for p in pods]
    policy = f"raftset-test-refuse-leases-{namespace}"
    admission.create_validating_admission_policy({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{
                     "apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                     "resources": ["leases"], "resourceNames": names}]},
                 "validations": [{"expression": f"request.namespace != '{namespace}'",
                                  "message": "test: this sidecar cannot write its heartbeat Lease"}]},
    })
    admission.create_validating_admission_policy_binding({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy},
        "spec": {"policyName": policy, "validationActions": ["Deny"]},
    })

    def refused() -> bool:
        try:
            for name in names:
                leases.patch_namespaced_lease(name, namespace, {"metadata": {"labels": {"probe": "x"}}}, dry_run="All")
        except ApiException as exc:
            return exc.status in (403, 422) and "cannot write its heartbeat Lease" in str(exc.body)
        return False
    try:
        wait_for(refused, 30, f"the API refusing writes of {names}")
        yield
    finally:
        admission.delete_validating_admission_policy_binding(policy)
        admission.delete_validating_admission_policy(policy)
        wait_for(lambda: not refused(), 30, f"the API accepting writes of {names} again")
