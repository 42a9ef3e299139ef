"""Two operator replicas, one acting: the standby takes over a half-done scale-in.

Both replicas are the real operator process with `--leader-elect` and the shipped lease
timings (raftset.operator.election.Timing); pods are kwok pods and `Sidecars` writes the
members' heartbeats and Raft membership as in tests/e2e/test_operator.py.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from raftset.operator import election
from tests.harness.operator import Operator, Sidecars, install_crds, wait_for
from tests.harness.view import STEP_TIMEOUT, ClusterView

pytestmark = pytest.mark.e2e

TIMING = election.Timing()  # what the Deployment runs with
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy


def lease(api: client.ApiClient, namespace: str) -> client.V1Lease | None:
    try:
        return client.CoordinationV1Api(api).read_namespaced_lease(election.LEASE_NAME, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def holder(api: client.ApiClient, namespace: str) -> str | None:
    found = lease(api, namespace)
    return found.spec.holder_identity if found is not None else None


def lease_writes(api: client.ApiClient, namespace: str, since: str, until_holder: str,
                 timeout: float) -> list[client.V1Lease]:
    """The operator Lease as each write after resourceVersion `since` left it, until `until_holder` holds it."""
    seen: list[client.V1Lease] = []
    stream = watch.Watch().stream(client.CoordinationV1Api(api).list_namespaced_lease, namespace,
                                  field_selector=f"metadata.name={election.LEASE_NAME}",
                                  resource_version=since, timeout_seconds=int(timeout))
    for event in stream:
        seen.append(event["object"])
        if event["object"].spec.holder_identity == until_holder:
            return seen
    raise AssertionError(f"no take-over by {until_holder} within {timeout:.0f}s; holders written: "
                         f"{[w.spec.holder_identity for w in seen]}")


# The promise (election.Timing): a dead holder is replaced within lease_duration + 2 x retry_period of
# its last renewal, each of the standby's two rounds in that span (the one that first sees the last
# renewal, the one that takes over) taking up to one request timeout of its own.
TAKEOVER_BOUND = TIMING.lease_duration + 2 * (TIMING.retry_period + TIMING.request_timeout)


@pytest.fixture
def replicas(control_plane: Any, namespace: str, tmp_path: Path) -> Iterator[dict[str, Operator]]:
    """Two replicas named like the Deployment's pods; their Lease lives in the test's namespace."""
    install_crds(control_plane.kubeconfig)
    ops = {name: Operator(control_plane.kubeconfig, tmp_path / f"{name}.log", default_kind="AdvancedStatefulSet",
                          args=("--leader-elect", "--lease-namespace", namespace), POD_NAME=name)
           for name in ("operator-a", "operator-b")}
    try:
        for op in ops.values():
            op.start()
        yield ops
    finally:
        for op in ops.values():
            op.stop()


def test_the_standby_takes_over_a_scale_in_when_the_active_replica_is_killed(
        control_plane: Any, namespace: str, replicas: dict[str, Operator]) -> None:
    c = ClusterView(control_plane.kubeconfig, "EtcdCluster", "ha", namespace, "AdvancedStatefulSet")
    active_name = wait_for(lambda: holder(c.api, namespace), 60, "a replica holding the operator Lease")
    (standby_name,) = set(replicas) - {active_name}
    active, standby = replicas[active_name], replicas[standby_name]

    c.create(5)
    with Sidecars(c.api, namespace, c.name, leader=4):
        c.wait_pods(0, 1, 2, 3, 4)
        c.wait_settled(5)
        # Exactly one acts: the standby has only waited (kopf never started in it).
        waited = standby.log.read_text()
        assert "standing by" in waited and "kopf." not in waited, waited[-2000:]
        # ...and answers its liveness probe meanwhile, so the kubelet does not restart it.
        with _DIRECT.open(standby.liveness, timeout=5) as reply:
            assert reply.status == 200 and reply.read() == b"standby\n"

        c.scale(3)
        wait_for(lambda: c.workload()["spec"]["replicas"] == 4, STEP_TIMEOUT, "the first scale-in step")
        before = lease(c.api, namespace)
        assert before is not None and before.spec.holder_identity == active_name
        killed = time.monotonic()
        active.kill()
        assert c.workload()["spec"]["reserveOrdinals"] == [3]
        # Every write of the Lease from before the kill (a renewal in flight at the kill included) until
        # the take-over: measured between the two replicas' own writes, not when this test got to look.
        writes = [before, *lease_writes(c.api, namespace, before.metadata.resource_version, standby_name,
                                        2 * TAKEOVER_BOUND)]
        last = max(w.spec.renew_time for w in writes if w.spec.holder_identity == active_name)
        taken = writes[-1]
        assert taken.spec.holder_identity == standby_name, [w.spec.holder_identity for w in writes]
        takeover = (taken.spec.acquire_time - last).total_seconds()
        c.wait_pods(0, 1, 4)
        obj = c.wait_settled(3)
        completed = time.monotonic() - killed
        print(f"operator HA: standby took the Lease {takeover:.1f}s after the active replica's last renewal "
              f"(lease {TIMING.lease_duration:.0f}s, retry {TIMING.retry_period:.0f}s, bound {TAKEOVER_BOUND:.0f}s); "
              f"the scale-in completed {completed:.1f}s after the kill")
        # Not before the holder's lease ran out (less the standby's read that first saw it), nor after the promise.
        assert TIMING.lease_duration - TIMING.request_timeout <= takeover <= TAKEOVER_BOUND, takeover
        assert obj["status"]["leader"] == "ha-4", "the leader's member is kept"
        assert c.workload()["spec"]["reserveOrdinals"] == [2, 3]
        # Two steps, each member removed once: the killed replica's last Event may be lost, none is doubled.
        scaled_in = [m for reason, m in c.events() if reason == "ScalingIn"]
        assert 1 <= len(scaled_in) <= 2 and len(set(scaled_in)) == len(scaled_in), scaled_in
        assert "acquired by operator-" in standby.log.read_text() and standby.alive()
