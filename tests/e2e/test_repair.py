"""A member whose store cannot start is replaced (or reported) through the whole stack.

Real operator, workload controllers, sidecars and etcd members; the pod runner restarts the
store with kubelet's backoff and reports restartCount and the last termination in the pod's
status, which is what the sidecar diagnoses. The fault is real: one follower's data is
garbled while its store is stopped, so the store exits at every start:

- WAL: its head overwritten; etcd panics at start without a corruption text, so only the
  crash-loop threshold (spec.repair.crashLoopRestarts) tells;
- db: bbolt's meta pages overwritten; etcd refuses to open it ("failed to open database"),
  a corruption text in the termination message.

Every scenario ends with the acknowledged-write checker.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from raftset import contract
from raftset.contract import SidecarEnv
from tests.harness.checker import Writer, check
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import Operator
from tests.harness.waiting import wait_for
from tests.harness.view import ClusterView
from tests.e2e.test_fullstack import FAST, assert_writes_flowed, stack
from tools.devcluster.podrunner import PodRunner

pytestmark = pytest.mark.e2e

THRESHOLD = 3  # spec.repair.crashLoopRestarts (the least allowed is 2)
VICTIM = 2  # a follower: leadership is moved to ordinal 0 first
REPLACE_TIMEOUT = 240.0


def garble_wal(data_dir: Path) -> None:
    """The head of every WAL segment: etcd 3.5-3.7 panic reading it ("cannot use none as id")."""
    segments = sorted((data_dir / "member" / "wal").glob("*.wal"))
    assert segments, f"no WAL in {data_dir}"
    for segment in segments:
        with open(segment, "r+b") as fh:
            fh.write(b"\xff" * 64)


def garble_db(data_dir: Path) -> None:
    """Both bbolt meta pages and the first pages: etcd refuses to open the database."""
    with open(data_dir / "member" / "snap" / "db", "r+b") as fh:
        fh.write(os.urandom(8192))


FAULTS = {"wal": garble_wal, "db": garble_db}


def running_store(runner: PodRunner, namespace: str, pod: str) -> tuple[int, Path]:
    """The pid of the pod's running store process and its data dir, as kubelet would run them."""
    worker = next(w for w in runner.workers.values() if w.pod.key == f"{namespace}/{pod}")
    store = worker.containers.store
    assert store is not None and store.alive(), f"{pod}: its store does not run"
    return store.pid, Path(worker.containers.sidecar_env[SidecarEnv.DATA_DIR])


def store_fault(runner: PodRunner, namespace: str, pod: str, garble: Any) -> None:
    """Freeze the pod's store (no write can race), garble its data, then SIGKILL it: the runner
    restarts it, and it fails at every start."""
    pid, data_dir = running_store(runner, namespace, pod)
    os.kill(pid, signal.SIGSTOP)
    try:
        garble(data_dir)
    finally:
        os.kill(pid, signal.SIGKILL)


def store_status(kv: ClusterView, ordinal: int) -> dict[str, Any]:
    pod = kv.core.read_namespaced_pod(contract.pod_name(kv.name, ordinal), kv.namespace)
    found = [s for s in pod.status.container_statuses or [] if s.name == "etcd"]
    return kv.core.api_client.sanitize_for_serialization(found[0]) if found else {}


def ids(kv: ClusterView) -> dict[str, int]:
    return {m.name: m.id for m in kv.members(0, 1)}


def create_repairable(kv: ClusterView, backend: str, etcd: EngineUnderTest, policy: str, **spec: Any) -> None:
    """A 3-member cluster on volumes, replaced at THRESHOLD restarts under `policy`."""
    kv.create(3, workloadKind=backend, version=etcd.version, storage={"size": "1Gi"},
              repair={"policy": policy, "crashLoopRestarts": THRESHOLD}, **FAST, **spec)


def under_writes(kv: ClusterView) -> tuple[int, Writer]:
    """Leadership on ordinal 0 and a writer on the two that keep quorum; the victim's member id."""
    kv.wait_healthy(0, 1, 2)
    kv.move_leader(0, 0, 1, 2)
    old = ids(kv)[contract.pod_name(kv.name, VICTIM)]
    writer = Writer([kv.url(0), kv.url(1)], kv.tls)
    writer.start()
    wait_for(lambda: writer.ok > 20, 20, "the writer running")
    return old, writer


# Each fault on one backend: the builtin StatefulSet with a WAL fault, Advanced StatefulSet with a db fault.
@pytest.mark.parametrize(("backend", "fault"), [("StatefulSet", "wal"), ("AdvancedStatefulSet", "db")])
def test_a_follower_whose_store_cannot_start_is_replaced_automatically(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, backend: str, fault: str,
        etcd: EngineUnderTest) -> None:
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    create_repairable(kv, backend, etcd, "Automatic")
    replaced_automatically(kv, runner, fault)


def replaced_automatically(kv: ClusterView, runner: PodRunner, fault: str) -> int:
    """The victim's store garbled (`fault`) under writes: its member is replaced by a new one without a failed
    write, the cluster ends Available, and the checker passes (over the view's TLS, if any). The new id."""
    namespace = kv.namespace
    old, writer = under_writes(kv)
    victim = contract.pod_name(kv.name, VICTIM)
    try:
        store_fault(runner, namespace, victim, FAULTS[fault])
        # The runner reports the failing starts as kubelet would: an exit in error, with its last words.
        wait_for(lambda: (store_status(kv, VICTIM).get("lastState") or {}).get("terminated", {}).get("exitCode", 0),
                 60, f"{victim}'s store exit in its pod status")

        def replaced() -> int | None:
            members = kv.members(0, 1)
            mine = [m.id for m in members if m.name == victim]
            voting = [m for m in members if m.started and not m.is_learner]
            return mine[0] if len(members) == 3 and len(voting) == 3 and mine and mine[0] != old else None
        new = wait_for(replaced, REPLACE_TIMEOUT, f"{victim} voting as a new member")
        wait_for(lambda: any(r == "Replaced" for r, _ in kv.events()), 60, "the Replaced Event")
        kv.wait_healthy(0, 1, 2)
        # kopf posts a reconcile's Events before it patches the status: wait for the status too.
        wait_for(lambda: kv.condition("Available").get("status") == "True"
                 and kv.condition("Degraded").get("status") == "False" and not kv.status().get("replacements"),
                 60, "Available, not Degraded, no replacement row")
        written = writer.ok
        wait_for(lambda: writer.ok > written + 20, 30, "writes flowing after the replacement")
    finally:
        writer.stop()
    events = kv.events()
    print("events:", *sorted(set(events)), sep="\n  ")
    reasons = {r for r, _ in events}
    assert {"ReplaceRemoving", "Replaced"} <= reasons, reasons
    why = " ".join(m for r, m in events if r == "Replaced" and victim in m)  # the Event says why it began
    if fault == "wal":  # no corruption text: the restart count told
        assert "crash-loops" in why, why
    else:
        assert "data corrupt" in why, why
    assert new != old
    pod = kv.core.read_namespaced_pod(victim, namespace)
    assert int(pod.metadata.annotations[contract.ANNOTATION_RESTART_BASELINE]) >= 1  # counted afresh from here
    assert_writes_flowed(writer, at_least=50)
    asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked, kv.tls))
    return new


@pytest.mark.parametrize("backend", ["AdvancedStatefulSet"])
def test_under_manual_policy_a_crash_looping_follower_is_reported_and_kept_until_a_person_asks(
        control_plane: Any, operator: Operator, namespace: str, runner: PodRunner, backend: str,
        etcd: EngineUnderTest) -> None:
    kv = stack(control_plane.kubeconfig, namespace, "kv", runner)
    create_repairable(kv, backend, etcd, "Manual")
    old, writer = under_writes(kv)
    victim = contract.pod_name(kv.name, VICTIM)
    try:
        store_fault(runner, namespace, victim, garble_wal)

        def needed() -> dict[str, Any] | None:
            rows = [r for r in kv.status().get("replacements") or [] if r["pod"] == victim]
            degraded = kv.condition("Degraded")
            return rows[0] if rows and rows[0]["phase"] == contract.ReplacePhase.NEEDED and \
                degraded.get("status") == "True" and degraded.get("reason") == "ReplaceNeeded" else None
        row = wait_for(needed, REPLACE_TIMEOUT, f"{victim}: replacement Needed, Degraded ReplaceNeeded")
        assert "crash-loops" in row["message"], row
        assert store_status(kv, VICTIM)["restartCount"] >= THRESHOLD
        # Nothing removed: the old member stays in Raft while its store crash-loops.
        assert ids(kv)[victim] == old and len(kv.members(0, 1)) == 3
        # A person asks: the same replacement runs to its end.
        kv.core.patch_namespaced_pod(victim, namespace,
                                     {"metadata": {"annotations": {contract.ANNOTATION_REPLACE: "true"}}})

        def replaced() -> bool:
            members = kv.members(0, 1)
            return len(members) == 3 and all(m.started and not m.is_learner for m in members) \
                and ids(kv).get(victim) not in (None, old)
        wait_for(replaced, REPLACE_TIMEOUT, f"{victim} voting as a new member")
        kv.wait_healthy(0, 1, 2)
        wait_for(lambda: kv.condition("Degraded").get("status") == "False" and not kv.status().get("replacements"),
                 60, "not Degraded, no replacement row")
        written = writer.ok
        wait_for(lambda: writer.ok > written + 20, 30, "writes flowing after the replacement")
    finally:
        writer.stop()
    replaced_events = wait_for(lambda: [m for r, m in kv.events() if r == "Replaced" and victim in m], 60,
                               "the Replaced Event")
    assert "crash-loops" in replaced_events[0], replaced_events
    assert_writes_flowed(writer, at_least=50)
    asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked))
