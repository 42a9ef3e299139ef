"""A template that breaks a member: the roll stops at that one member, says so, and a template rolled
back restarts it.

The roll restarts one member at a time and waits for it to be Ready before the next. A template on
which the store cannot start (here an option etcd refuses at start) leaves that member crash-looping:
the roll must take no second member, and report itself stuck (`Degraded=RollStuck`) once it has
restarted nothing for the stuck period. Rolling the template back makes the broken member the one
pod on an older template; it serves nothing, and waiting for it to be Ready would wait forever
(before the fix: the roll waited "for kv-2 to be Ready" with every other member healthy). It is
restarted on the good template first, and the cluster comes back whole with every acknowledged write.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_fullstack import FAST, assert_writes_flowed, one_out_at_a_time, stack
from tests.harness.checker import Writer, check
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import kubectl, running_operator, wait_for
from tests.harness.podwatch import PodWatch
from tools.devcluster.podrunner import PodRunner

pytestmark = pytest.mark.e2e

STUCK_SECONDS = 20
BROKEN = {"log-level": "no-such-level"}  # etcd panics at start on it: "unknown log level"


def test_a_template_that_breaks_a_member_stops_the_roll_at_it_and_its_roll_back_restarts_it(
        control_plane: Any, namespace: str, runner: PodRunner, etcd: EngineUnderTest, tmp_path: Path) -> None:
    kubeconfig = control_plane.kubeconfig
    with running_operator(kubeconfig, tmp_path / "operator.log", RAFTSET_STEP_STUCK_SECONDS=str(STUCK_SECONDS)):
        kv = stack(kubeconfig, namespace, "kv", runner)
        kv.create(3, version=etcd.version, storage={"size": "1Gi"}, **FAST)
        kv.wait_healthy(0, 1, 2)
        ids = {m.name: m.id for m in kv.members(0, 1, 2)}
        writer = Writer([kv.url(o) for o in (0, 1, 2)])
        writer.start()
        try:
            with PodWatch(kv.core, namespace, kv.name) as pods:
                def patch_options(options: dict[str, Any]) -> None:
                    kubectl(kubeconfig, "patch", f"etcdclusters/{kv.name}", "-n", namespace, "--type=merge",
                            "-p", json.dumps({"spec": {"options": options}}))

                patch_options(BROKEN)
                wait_for(lambda: kv.condition("Degraded").get("reason") == "RollStuck", 120 + STUCK_SECONDS,
                         "the roll reported stuck")
                stuck = kv.condition("Degraded")
                broken = [change.name for change, _ in one_out_at_a_time(pods, ("kv-0", "kv-1", "kv-2"))]
                assert len(broken) == 1, f"the roll took a second member past a broken one: {broken}"
                assert f"waiting for {broken[0]} to be Ready" in stuck["message"], stuck
                assert f"no pod restarted for {STUCK_SECONDS} s" in stuck["message"], stuck
                patch_options({key: None for key in BROKEN})
                wait_for(lambda: kv.condition("Degraded").get("status") == "False"
                         and kv.condition("Progressing").get("status") == "False", 240, "the roll back done")
                kv.wait_healthy(0, 1, 2)
        finally:
            writer.stop()
    restarts = [change.name for change, _ in one_out_at_a_time(pods, ("kv-0", "kv-1", "kv-2"))]
    assert restarts == [broken[0], broken[0]], \
        f"the broken member restarted on the good template, no other member restarted: {restarts}"
    assert {m.name: m.id for m in kv.members(0, 1, 2)} == ids, "a restart keeps every member"
    assert_writes_flowed(writer, at_least=50)
    asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked))
