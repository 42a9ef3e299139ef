"""Every engine the matrix names is built and runs here: a missing binary fails, it never skips."""

from __future__ import annotations

import subprocess

import pytest

from tests.harness import engines
from tests.harness.engines import EngineUnderTest

pytestmark = pytest.mark.etcd


@pytest.mark.parametrize("under_test", engines.MATRIX, ids=[e.label for e in engines.MATRIX])
def test_the_engine_binary_is_built_and_runs(under_test: EngineUnderTest) -> None:
    engines.ready(under_test)  # builds it, or finds it in the cache; raises when it cannot
    binary = under_test.bin_dir / under_test.engine.name
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    version = under_test.label.split("-", 1)[1].split("+")[0]
    assert version in out.stdout + out.stderr, out.stdout
