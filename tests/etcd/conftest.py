"""Fixtures of the etcd tier: the engine matrix and a `make_lab` factory that cleans up
every process it started.

Every test runs on the default etcd version; tests marked `lifecycle` (the membership
lifecycle subset) also run on every other supported etcd version and on Xline. The test
id names the build: `test_x[etcd-3.7.3]`, `test_x[xline-0.6.1+71479a4f]`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import engines
from tests.harness.engines import EngineUnderTest
from tests.harness.lab import Lab


# Known and measured, not hidden: a strict xfail turns red the day it passes. On Xline the
# second membership change of a cluster waits for ever on the membership lock: the member
# that bootstrapped alone keeps a stale view of the member added after it and fails the
# linearizable reads the lock needs (docs/engines.md). Every lifecycle test grows past two
# members. The build itself is not excused: test_engine_builds.py fails without it.
KNOWN_FAILURES = {
    engines.XLINE.label: "Xline: a cluster that bootstrapped alone cannot take its third member "
                         "(stale client view of the second: linearizable reads, so the lock, fail)",
}


# Every Xline lifecycle test stops at that same step (growing past two members), so one of them
# stands for all in each run (about 50 s each); they all rejoin when the growth problem is fixed.
# test_engine_builds.py::test_xline_takes_its_first_learner shows what does work on Xline.
XLINE_REPRESENTATIVE = "test_new_cluster_grows_one_member_at_a_time"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "engine_under_test" in metafunc.fixturenames:
        chosen = engines.MATRIX if metafunc.definition.get_closest_marker("lifecycle") else (engines.DEFAULT,)
        if metafunc.definition.originalname != XLINE_REPRESENTATIVE:
            chosen = tuple(e for e in chosen if e.label not in KNOWN_FAILURES)
        params = [pytest.param(e, id=e.label, marks=[pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[e.label])]
                               if e.label in KNOWN_FAILURES else []) for e in chosen]
        metafunc.parametrize("engine_under_test", params, scope="session")


@pytest.fixture
def make_lab(kube_apiserver: Any, engine_under_test: EngineUnderTest, tmp_path: Path,
             request: pytest.FixtureRequest) -> Iterator[Callable[..., Lab]]:
    try:
        engines.ready(engine_under_test)
    except Exception as exc:  # noqa: BLE001 - a missing engine fails its tests, never skips them
        pytest.fail(f"{engine_under_test.label}: its binaries could not be built or found: {exc}")
    labs: list[Lab] = []

    def make(**kwargs: Any) -> Lab:
        lab = Lab(kube_apiserver.kubeconfig, tmp_path / f"lab{len(labs)}", engine=engine_under_test, **kwargs)
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
