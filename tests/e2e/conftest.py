"""Fixtures of the e2e tier: a namespace per test, the pod runner, the etcd build under test.

The operator (`operator`, module scope) is in tests/conftest.py beside the k8s tier's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import engines
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import delete_run_namespace, kubectl
from tools.devcluster.podrunner import RUN_NAMESPACE_PREFIX, PodRunner


@pytest.fixture
def namespace(control_plane: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A new namespace; one whose pods the `runner` runs is named so, so that kwok leaves their
    readiness to the runner's probes (the others' pods kwok makes Ready at once)."""
    prefix = RUN_NAMESPACE_PREFIX if "runner" in request.fixturenames else "t-"
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    kubectl(control_plane.kubeconfig, "create", "namespace", name)
    yield name
    delete_run_namespace(control_plane.kubeconfig, name)


@pytest.fixture
def runner(control_plane: Any, namespace: str, tmp_path: Path) -> Iterator[PodRunner]:
    """What kubelet would run in the namespace's pods (sidecar, then the real store), on loopback;
    `fault_dir(namespace, pod)` is that pod's sidecar's test fault hook (raftset.sidecar.supervision)."""
    with PodRunner(control_plane.kubeconfig, tmp_path / "runner", namespace=namespace,
                   faults=tmp_path / "faults") as pods:
        yield pods
    assert not pods.supervisor.procs, "the runner left processes behind"


@pytest.fixture(params=[engines.DEFAULT], ids=lambda e: e.label)
def etcd(request: pytest.FixtureRequest) -> EngineUnderTest:
    """The etcd build a test's cluster runs (its `version`), named in the test id: the default
    build; a test parametrized over `etcd` itself (test_fullstack.OLDER_BUILDS) overrides it."""
    return request.param
