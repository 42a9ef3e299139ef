"""Fixtures of the etcd tier: a `make_lab` factory that cleans up every process it started."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.lab import Lab


@pytest.fixture(scope="session", autouse=True)
def _etcd_binaries() -> None:
    """This tier needs Debian's etcd; without it every test here fails loudly."""
    missing = [b for b in ("etcd", "etcdctl") if shutil.which(b) is None]
    if missing:
        pytest.fail(f"etcd tier needs {', '.join(missing)} (apt-get install etcd-server etcd-client)")


@pytest.fixture
def make_lab(kube_apiserver: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Lab]]:
    labs: list[Lab] = []

    def make(**kwargs: Any) -> Lab:
        lab = Lab(kube_apiserver.kubeconfig, tmp_path / f"lab{len(labs)}", **kwargs)
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
