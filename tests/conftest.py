"""Session fixtures: a real local control plane, started once per test session.

`kube_apiserver` (etcd + kube-apiserver) serves the `k8s` tier; `control_plane` (adds
controller-manager, scheduler, OpenKruise and kwok) serves the `e2e` tier. Missing binaries
are built first (minutes on a cold cache); a component that cannot be built or started
makes the fixture, and so every test using it, fail: these tiers never skip.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tools.devcluster import Plane, start


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with start(workdir=tmp_path_factory.mktemp("kube-apiserver"), full=False) as plane:
        yield plane


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with start(workdir=tmp_path_factory.mktemp("control-plane"), full=True) as plane:
        yield plane


TIERS = ("unit", "etcd", "k8s", "e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`make test` selects by tier: a test without one would never run, so refuse it."""
    untiered = [item.nodeid for item in items if not any(item.get_closest_marker(t) for t in TIERS)]
    if untiered:
        raise pytest.UsageError(f"tests without a tier marker {TIERS}: {untiered[:5]}")
