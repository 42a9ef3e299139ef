"""Fixtures of the etcd tier: the engine matrix and a `make_lab` factory that cleans up
every process it started.

Every test runs on the default etcd version; tests marked `lifecycle` (the membership
lifecycle subset) also run on every other supported build, Xline included (its initial members
bootstrap together: docs/engines.md). The test id names the build: `test_x[etcd-3.7.3]`, `test_x[xline-0.6.1+71479a4f]` (the parametrization
of `engine_under_test` is in tests/conftest.py: the k8s tier's labs run a real store too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.engines import EngineUnderTest
from tests.harness.lab import Lab


@pytest.fixture
def make_lab(kube_apiserver: Any, engine_ready: EngineUnderTest, tmp_path: Path,
             request: pytest.FixtureRequest) -> Iterator[Callable[..., Lab]]:
    labs: list[Lab] = []

    def make(**kwargs: Any) -> Lab:
        lab = Lab(kube_apiserver.kubeconfig, tmp_path / f"lab{len(labs)}", engine=engine_ready, **kwargs)
        labs.append(lab)
        return lab

    yield make
    failed = getattr(request.node, "rep_call", None)
    for lab in labs:
        if failed is not None and failed.failed:
            print(lab.logs())
        lab.close()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
