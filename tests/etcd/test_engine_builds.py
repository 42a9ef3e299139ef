"""Every engine the matrix names is built and runs here: a missing binary fails, it never skips.

And Xline's own way to start a cluster, with real Xline members: the initial members bootstrap
together, a later one joins as a learner and is promoted (docs/engines.md).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.harness import engines
from tests.harness.engines import EngineUnderTest
from tests.harness.lab import Lab
from tests.harness.scenarios import grow

pytestmark = pytest.mark.etcd


@pytest.mark.parametrize("under_test", engines.MATRIX, ids=[e.label for e in engines.MATRIX])
def test_the_engine_binary_is_built_and_runs(under_test: EngineUnderTest) -> None:
    engines.ready(under_test)  # builds it, or finds it in the cache; raises when it cannot
    binary = under_test.bin_dir / under_test.engine.name
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    version = under_test.label.split("-", 1)[1].split("+")[0]
    assert version in out.stdout + out.stderr, out.stdout


@pytest.mark.parametrize("under_test", [engines.XLINE], ids=[engines.XLINE.label])
async def test_xline_initial_members_bootstrap_together_then_a_third_joins_as_learner(
        kube_apiserver: Any, tmp_path: Path, under_test: EngineUnderTest) -> None:
    engines.ready(under_test)
    lab = Lab(kube_apiserver.kubeconfig, tmp_path / "lab", replicas=2, engine=under_test)
    try:
        await grow(lab, 2)  # both initial members start with state new and the full member list
        assert all("join: bootstrap" in lab.pod(o).log_text() for o in (0, 1))
        lab.scale(3)
        lab.pod(2).start()
        lab.pod(2).wait_ready()
        members = await lab.wait_voting(3)
        assert sorted(m.name for m in members) == ["demo-0", "demo-1", "demo-2"]
        assert "join: add-learner" in lab.pod(2).log_text() and "promoted member" in lab.pod(2).log_text()
        await lab.put("/grown/key", "v", 0)  # a linearizable write and read on the first member too
        assert await lab.get("/grown/key", 0, serializable=False) == b"v"
    finally:
        lab.close()
