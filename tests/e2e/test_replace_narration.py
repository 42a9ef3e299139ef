"""A replacement that begins and ends between two reconciles is still narrated, once (issue 32).

Real operator, workload controllers, sidecars and etcd members. The operator is restarted with
a reconcile interval far longer than the test, so that a follower's replacement runs from the
request to the new member voting with no reconcile in between: the operator's own reconcile
counter (its /metrics) proves it. The operator then starts again and reconciles more than once;
the cluster keeps exactly one `Replaced` Event, naming the old and the new member.
"""

from __future__ import annotations

import asyncio
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from raftset import contract
from tests.e2e.test_fullstack import FAST, stack
from tests.e2e.test_repair import VICTIM, ids, under_writes
from tests.harness.checker import check
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import Operator, running_operator
from tests.harness.view import ClusterView
from tests.harness.waiting import wait_for
from tools.devcluster.podrunner import PodRunner

pytestmark = pytest.mark.e2e

STEPS = ("ReplaceRemoving", "ReplaceRejoining", "ReplaceLearner", "Replaced")
NEVER = "3600"  # RAFTSET_RECONCILE_INTERVAL: no recheck of a cluster in motion during the test
_RECONCILES = re.compile(r"^raftset_operator_reconciles_total\{[^}]*\}\s+([0-9.e+]+)$", re.MULTILINE)


def reconciles(op: Operator) -> float:
    """How many reconciles this operator process has run (every kind and result)."""
    with urllib.request.urlopen(op.metrics_url, timeout=10) as answer:
        return sum(float(v) for v in _RECONCILES.findall(answer.read().decode()))


def replaced_events(kv: ClusterView, victim: str) -> list[str]:
    return [m for r, m in kv.events() if r == "Replaced" and victim in m]


def test_a_follower_replaced_between_two_reconciles_leaves_one_replaced_event(
        control_plane: Any, namespace: str, runner: PodRunner, etcd: EngineUnderTest, tmp_path: Path) -> None:
    kubeconfig = control_plane.kubeconfig
    kv = stack(kubeconfig, namespace, "kv", runner)
    victim = contract.pod_name(kv.name, VICTIM)
    with running_operator(kubeconfig, tmp_path / "operator-1.log"):
        kv.create(3, workloadKind="StatefulSet", version=etcd.version, **FAST)
        old, writer = under_writes(kv)
        wait_for(lambda: len(kv.status().get("members") or []) == 3, 60, "the status naming three members")
    try:
        # Replaced while no operator runs: every watch event of the replacement wakes a round of a
        # running operator (issue 28), so "between two reconciles" is an operator that is down.
        kv.core.patch_namespaced_pod(victim, namespace,
                                     {"metadata": {"annotations": {contract.ANNOTATION_REPLACE: "true"}}})

        def replaced() -> int | None:
            members = kv.members(0, 1)
            voting = [m for m in members if m.started and not m.is_learner]
            annotations = kv.core.read_namespaced_pod(victim, namespace).metadata.annotations or {}
            new = ids(kv).get(victim)
            done = len(voting) == 3 and new not in (None, old) and contract.ANNOTATION_REPLACE not in annotations
            return new if done else None
        new = wait_for(replaced, 120, f"{victim} voting as a new member, the request cleared")
        assert not replaced_events(kv, victim), "narrated without an operator?"
        # Started again: its start reconciles narrate what the last one never saw; a third start tells nothing again.
        for run in (2, 3):
            with running_operator(kubeconfig, tmp_path / f"operator-{run}.log",
                                  RAFTSET_RECONCILE_INTERVAL=NEVER) as op:
                wait_for(lambda: reconciles(op) >= 2, 60, "the operator's start reconciles")
                wait_for(lambda: replaced_events(kv, victim), 30, f"the Replaced Event of {victim}")
        told = replaced_events(kv, victim)  # read after the last operator stopped: whatever it queued is posted
        written = writer.ok
        wait_for(lambda: writer.ok > written + 20, 30, "writes flowing after the replacement")
    finally:
        writer.stop()
    print("Replaced events:", *told, sep="\n  ")
    assert len(told) == 1, told
    assert f"{old:x}" in told[0] and f"{new:x}" in told[0], (f"{old:x}", f"{new:x}", told)
    assert "asked for" in told[0], told
    events = kv.events()
    print("events:", *sorted(set(events)), sep="\n  ")
    # Every step the follower's replacement took, each told once.
    steps = sorted(r for r, m in events if r in STEPS and m.startswith(f"{victim}:"))
    assert steps == sorted(STEPS), events
    asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked))
