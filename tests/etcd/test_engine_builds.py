"""Every engine the matrix names is built and runs here: a missing binary fails, it never skips.

And what works on Xline today, with real Xline members: bootstrap, a learner added before
its store starts, promotion (docs/engines.md says what does not, yet).
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
async def test_xline_takes_its_first_learner(kube_apiserver: Any, tmp_path: Path, under_test: EngineUnderTest) -> None:
    engines.ready(under_test)
    lab = Lab(kube_apiserver.kubeconfig, tmp_path / "lab", replicas=2, engine=under_test)
    try:
        await grow(lab, 2)  # bootstrap alone, then MemberAdd as learner, start, promote
        members = await lab.wait_voting(2)
        assert sorted(m.name for m in members) == ["demo-0", "demo-1"]
        assert all(not m.is_learner for m in members)
        assert "promoted member" in lab.pod(1).log_text()
    finally:
        lab.close()
