"""Issue 28, item 1: a cluster is reconciled when what it reads changes, not on a timer.

The operator runs with every period an hour long (the recheck of a cluster in motion, the resync,
the status refresh) and Leases that last ten minutes: nothing but a watch event can run a round.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from raftset import contract
from tests.harness.operator import Operator, api, heartbeat_lease, install_crds, kubectl, member_id, wait_for

pytestmark = pytest.mark.k8s

HOUR = "3600"
CLUSTER = "woken"


def _lease(leases: client.CoordinationV1Api, namespace: str, ordinal: int, leader: int) -> None:
    """The member's heartbeat, written as its sidecar renews it (server-side apply: a new resourceVersion)."""
    pod = contract.pod_name(CLUSTER, ordinal)
    body = heartbeat_lease(namespace, CLUSTER, pod, role=contract.ROLE_LEADER if ordinal == leader
                           else contract.ROLE_FOLLOWER, member_id=member_id(ordinal), lease_seconds=600)
    leases.patch_namespaced_lease(body["metadata"]["name"], namespace, body, field_manager="sidecar",
                                  force=True, _content_type="application/apply-patch+yaml")


def _leader(custom: client.CustomObjectsApi, namespace: str) -> Any:
    cluster = custom.get_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters", CLUSTER)
    return (cluster.get("status") or {}).get("leader")


def test_a_member_change_is_reconciled_at_once_and_a_plain_renewal_is_not(
        kube_apiserver: Any, namespace: str, tmp_path: Path) -> None:
    kubeconfig = kube_apiserver.kubeconfig
    leases = client.CoordinationV1Api(api(kubeconfig))
    custom = client.CustomObjectsApi(api(kubeconfig))
    install_crds(kubeconfig)
    op = Operator(kubeconfig, tmp_path / "operator.log", RAFTSET_RECONCILE_INTERVAL=HOUR,
                  RAFTSET_RESYNC_SECONDS=HOUR, RAFTSET_RETRY_SECONDS=HOUR, RAFTSET_STATUS_REFRESH_SECONDS=HOUR)
    op.start()
    try:
        body = {"apiVersion": contract.API_VERSION, "kind": "EtcdCluster",
                "metadata": {"name": CLUSTER, "namespace": namespace},
                "spec": {"replicas": 3, "workloadKind": "StatefulSet", "tls": {"provider": "disabled"}}}
        kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(body))
        wait_for(lambda: op.reconciles(namespace, CLUSTER) >= 1, 60, "the cluster's first round")
        for ordinal in range(3):
            _lease(leases, namespace, ordinal, leader=0)
        leader0 = contract.pod_name(CLUSTER, 0)
        wait_for(lambda: _leader(custom, namespace) == leader0, 15, f"{leader0} shown leading: the new Leases woke a round")

        for ordinal in range(3):  # the first renewal seen of each Lease confirms it: that rings a round
            _lease(leases, namespace, ordinal, leader=0)
        time.sleep(3)  # those rounds run; what follows counts only rounds that came after
        before = op.reconciles(namespace, CLUSTER)
        for _ in range(5):  # fifteen renewals: a new resourceVersion and heartbeat time each, nothing else new
            for ordinal in range(3):
                _lease(leases, namespace, ordinal, leader=0)
        _lease(leases, namespace, 0, leader=1)
        moved = time.monotonic()
        _lease(leases, namespace, 1, leader=1)  # the last event: leadership moved
        leader1 = contract.pod_name(CLUSTER, 1)
        wait_for(lambda: _leader(custom, namespace) == leader1, 10, f"{leader1} shown leading within seconds",
                 interval=0.02)
        rounds = op.reconciles(namespace, CLUSTER) - before
        print(f"rounds after 15 renewals and a leadership change: {rounds}; "
              f"from the Lease change to the status showing it: {time.monotonic() - moved:.2f} s")
        assert 1 <= rounds <= 3, f"{rounds} rounds: the renewals woke rounds"
    finally:
        op.stop()
