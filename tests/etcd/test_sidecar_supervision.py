"""Fault e with a real sidecar and real etcd: a loop that stops making progress fails /livez.

Every dependency call in the loops is bounded by a timeout and every error is caught, so no
outside fault can wedge or kill a loop any more; what /livez guards against is a bug. The
test therefore makes a loop fail through the sidecar's test-only fault hook
(`RAFTSET_TEST_FAULT_DIR`, supervision.py), never set in a rendered pod.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from raftset import contract
from raftset.contract import SidecarEnv
from raftset.sidecar.supervision import TEST_FAULT_DIR_ENV
from tests.harness.lab import Pod, http_get, wait_for
from tests.harness.checker import Writer
from tests.harness.scenarios import check_members, grow
from tools.devcluster import kubelet

pytestmark = pytest.mark.etcd

STALL_S = 2.0  # the loops' bound is their interval (0.5 s, clean 1 s) plus this
# The sidecar's livenessProbe as rendered (/livez every 10 s, 3 failures, tests/unit/test_podrunner.py
# reads it), run as the stand-in kubelet runs it; on the lab's sidecar port.
SIDECAR_LIVENESS = kubelet.Probe(contract.SIDECAR_PORT, "/livez", period=1.0, failure_threshold=3, timeout=5.0)


def loop_metric(pod: Pod, name: str, loop: str) -> float:
    text = http_get(f"{pod.sidecar_url}/metrics")[1]
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == name and s.labels.get("loop") == loop)


def livez(pod: Pod) -> tuple[int, dict]:
    code, body = http_get(f"{pod.sidecar_url}/livez")
    return code, json.loads(body)


async def test_a_failing_or_hung_loop_fails_livez_and_readyz_stays_as_it_is(make_lab, tmp_path: Path) -> None:
    faults = tmp_path / "faults"
    faults.mkdir()
    lab = make_lab(replicas=1, env_extra={SidecarEnv.LOOP_STALL: str(STALL_S), TEST_FAULT_DIR_ENV: str(faults)})
    await grow(lab, 1)
    pod = lab.pod(0)
    member_id = pod.heartbeat()["member_id"]
    writer = Writer([pod.client_url], lab.client_tls())  # the store serves through all of it
    writer.start()
    wait_for(lambda: writer.ok > 20, 10, "the writer running")
    code, doc = livez(pod)
    assert code == 200 and doc["ok"] and set(doc["loops"]) == {"heartbeat", "promote", "clean", "membership", "backup", "maintenance", "repair"}, doc

    # A loop whose rounds keep failing unexpectedly: logged, counted, retried with backoff...
    (faults / "membership.raise").touch()
    wait_for(lambda: livez(pod)[0] == 503, 10, "/livez to fail")
    code, doc = livez(pod)
    assert any(p.startswith("membership: no progress") for p in doc["problems"]), doc
    assert doc["loops"]["membership"]["unexpected_errors"] >= 2, doc  # retried, not dead
    assert loop_metric(pod, "raftset_sidecar_loop_restarts_total", "membership") >= 2
    assert loop_metric(pod, "raftset_sidecar_loop_errors_total", "membership") >= 2
    assert pod.ready(), "readiness does not follow liveness: the store still serves and votes"
    assert pod.sidecar is not None and pod.sidecar.poll() is None
    assert "membership loop: unexpected error (retrying with backoff)" in pod.log_text()
    # ...and the loop recovers by itself once the fault is gone.
    (faults / "membership.raise").unlink()
    wait_for(lambda: livez(pod)[0] == 200, 10, "/livez to recover")

    # A round that never returns: only a restart helps, which is what a failing /livez gets.
    (faults / "heartbeat.hang").touch()
    wait_for(lambda: livez(pod)[0] == 503, 10, "/livez to fail on a hung loop")
    code, doc = livez(pod)
    assert doc["problems"] == [p for p in doc["problems"] if p.startswith("heartbeat: no progress")], doc
    assert "a round has not finished" in doc["problems"][0], doc
    assert pod.ready()

    # kubelet's livenessProbe stops the sidecar after its failureThreshold of failures in a row,
    # not at the first one...
    probe = dataclasses.replace(SIDECAR_LIVENESS, port=lab.http_port)
    sidecar = pod.containers.sidecar
    assert sidecar is not None
    state, failures = kubelet.ProbeState.liveness(time.monotonic()), []
    deadline = time.monotonic() + 30
    while sidecar.alive() and time.monotonic() < deadline:
        state = pod.containers.probe_liveness("sidecar", probe, state, time.monotonic())
        failures.append(state.failures)
        time.sleep(0.2)
    assert not sidecar.alive(), f"the livenessProbe did not stop the sidecar: {failures}"
    assert set(failures) == set(range(probe.failure_threshold)), failures  # then a fresh probe for the next run

    # ...and restarts it; the store keeps running, the member is the same. The pod's emptyDir
    # outlives the container: the startup file the first sidecar wrote is still there as the
    # new one starts, so a store restart before its join would still start.
    (faults / "heartbeat.hang").unlink()
    startup_file = Path(lab.engine.engine.startup_path(str(pod.run_dir)))
    written_by_first = startup_file.read_bytes()
    pod.restart_sidecar()
    assert startup_file.exists() and startup_file.read_bytes() == written_by_first, \
        "the run dir (an emptyDir) was wiped by a container restart"
    pod.wait_startup()
    pod.wait_ready()
    assert livez(pod)[0] == 200
    assert pod.heartbeat()["member_id"] == member_id
    assert len(await lab.members()) == 1
    written = writer.ok
    wait_for(lambda: writer.ok > written + 20, 10, "writes flowing after the sidecar's restart")
    writer.stop()
    assert writer.failed == 0, writer.errors[:5]
    await check_members(lab, writer, 0)
