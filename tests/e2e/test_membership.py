"""Raft membership as the truth, on the real control plane: a leave that Raft never
confirms blocks the next scale step and is reported, and the scale resumes once Raft
drops the member; evictions half-way through a scale-in keep the quorum of the
membership as it is (fault a).

Pods are kwok pods; `Sidecars` does what their sidecars would do: a member whose removal is
refused stays in Raft after its pod is gone, until membership-clean removes it once the
refusal ends and the (here short) grace period has passed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.harness.operator import Operator, Sidecars, install_crds, member_id, wait_for
from tests.harness.view import STEP_TIMEOUT, ClusterView

pytestmark = pytest.mark.e2e

STUCK_SECONDS = 8
CLEAN = {"sidecar": {"cleanGracePeriodSeconds": 5}}  # past it, membership-clean removes a refused member


@pytest.fixture(scope="module")
def operator(control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    install_crds(control_plane.kubeconfig)
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    op = Operator(control_plane.kubeconfig, log, RAFTSET_STEP_STUCK_SECONDS=str(STUCK_SECONDS))
    op.start()
    yield op
    op.stop()


def test_a_refused_leave_blocks_the_next_step_and_is_reported(
        control_plane: Any, operator: Operator, namespace: str) -> None:
    c = ClusterView(control_plane.kubeconfig, "EtcdCluster", "refuse", namespace, "StatefulSet")
    c.create(5, **CLEAN)
    with Sidecars(c.api, namespace, c.name, leader=0) as sidecars:
        sidecars.refusing.add(4)  # ordinal 4's sidecar will fail to remove its member
        c.wait_pods(0, 1, 2, 3, 4)
        c.wait_settled(5)
        c.scale(3)
        c.wait_pods(0, 1, 2, 3)  # the first step went: ordinal 4's pod is gone, its member is not

        def stuck() -> dict[str, Any] | None:
            cond = c.condition("Degraded")
            return cond if cond.get("reason") == "LeaveStuck" else None

        cond = wait_for(stuck, STEP_TIMEOUT, "Degraded=LeaveStuck")
        assert "refuse-4" in cond["message"] and member_id(4) in cond["message"]
        operator.rounds_pass(namespace, c.name)  # reconciles later, still blocked
        assert c.workload()["spec"]["replicas"] == 4, "a step was taken while the last one is unconfirmed"
        assert c.pods() == c.pod_names(0, 1, 2, 3)
        assert any(reason == "LeaveStuck" for reason, _ in c.events())
        # Its sidecar never deletes the Lease of a member it could not remove: the row turns unhealthy
        # once that Lease is no longer renewed (one Lease duration), not when the pod goes.
        def reported() -> dict[str, Any] | None:
            st = c.status()
            row = next(m for m in st["members"] if m["name"] == "refuse-4")
            return st if row["inRaft"] and row["id"] == member_id(4) and not row["healthy"] else None

        st = wait_for(reported, STEP_TIMEOUT, "refuse-4's member in Raft, reported unhealthy")
        # Rounds later, still stuck: told once (its message named a count of seconds, a new Warning each round).
        assert [reason for reason, _ in c.events()].count("LeaveStuck") == 1, c.events()
        assert any("runs no pod for ordinal 4" in d for d in st["disagreements"])
        # Outlasting a step (RAFTSET_STEP_STUCK_SECONDS), the disagreement gets one Warning, once.
        def disagreement_events() -> list[str]:
            return [m for reason, m in c.events() if reason == "MembershipDisagreement"]
        wait_for(lambda: any("runs no pod for ordinal 4" in m for m in disagreement_events()), STEP_TIMEOUT,
                 "a MembershipDisagreement Warning naming ordinal 4's member")
        operator.rounds_pass(namespace, c.name)  # more reconciles: no repeat
        assert len([m for m in disagreement_events() if "runs no pod for ordinal 4" in m]) == 1, disagreement_events()

        sidecars.refusing.clear()  # membership-clean removes the member (its grace has passed)
        c.wait_pods(0, 1, 2)
        obj = c.wait_settled(3)
        assert obj["status"]["disagreements"] == []
        assert {m["name"] for m in obj["status"]["members"]} == c.pod_names(0, 1, 2)
        assert c.condition("Degraded")["status"] == "False"
        assert any(reason == "Recovered" for reason, _ in c.events())


def test_evictions_in_the_middle_of_a_scale_in_keep_the_quorum_of_the_current_membership(
        control_plane: Any, operator: Operator, namespace: str) -> None:
    """Fault a: desired 3, Raft still 5 voters, 4 pods. The PDB must keep quorum(5) = 3 pods,
    so the real Eviction API lets one go and refuses the second (with minAvailable from the
    desired size, 2, it let both go and left 2 of 5 voters)."""
    c = ClusterView(control_plane.kubeconfig, "EtcdCluster", "evict", namespace, "StatefulSet")
    c.create(5, **CLEAN)
    policy = client.PolicyV1Api(c.api)
    with Sidecars(c.api, namespace, c.name, leader=0) as sidecars:
        sidecars.refusing.add(4)  # holds the scale-in half-way: ordinal 4's member stays in Raft
        c.wait_pods(0, 1, 2, 3, 4)
        c.wait_settled(5)
        c.scale(3)
        c.wait_pods(0, 1, 2, 3)

        def budget() -> Any:
            pdb = policy.read_namespaced_pod_disruption_budget(c.name, namespace)
            st = pdb.status
            return pdb if st is not None and st.current_healthy == 4 and st.observed_generation == \
                pdb.metadata.generation else None

        pdb = wait_for(budget, STEP_TIMEOUT, "the PDB observed with 4 healthy pods")
        assert pdb.spec.min_available == 3 and pdb.status.disruptions_allowed == 1

        def evict(ordinal: int) -> None:
            name = f"{c.name}-{ordinal}"
            client.CoreV1Api(c.api).create_namespaced_pod_eviction(
                name, namespace, client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace)))

        evict(1)
        with pytest.raises(ApiException) as refused:
            evict(2)
        assert refused.value.status == 429, refused.value
        sidecars.refusing.clear()
