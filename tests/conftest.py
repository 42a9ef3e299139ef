"""Session fixtures: a real local control plane, started once per test session.

`kube_apiserver` (etcd + kube-apiserver) serves the `k8s` tier; `control_plane` (adds
controller-manager, scheduler, OpenKruise and kwok) serves the `e2e` tier. Missing binaries
are built first (minutes on a cold cache); a component that cannot be built or started
makes the fixture, and so every test using it, fail: these tiers never skip.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import engines, work_units
from tests.harness import s3 as s3_harness
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import Operator, running_operator
from tools.devcluster import Plane, start
from tools.devcluster.podrunner import RUN_NAMESPACE_PREFIX
from tools.devcluster.s3 import S3Server


@pytest.fixture(scope="session", autouse=True)
def child_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Give every process a test starts a /tmp inside the run's own directory.

    The kube client writes client certificates and keys to temporary files and removes them
    at exit; a member or operator killed with SIGKILL would leave them in the host's /tmp.
    """
    path = tmp_path_factory.mktemp("tmp")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(path))
        yield path


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with start(workdir=tmp_path_factory.mktemp("kube-apiserver"), full=False) as plane:
        yield plane


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    # kwok makes every pod Ready but those a runner runs (tests/e2e/conftest.py names their namespaces).
    with start(workdir=tmp_path_factory.mktemp("control-plane"), full=True,
               run_namespace_prefix=RUN_NAMESPACE_PREFIX) as plane:
        yield plane


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """versitygw on loopback, shared by the session's backup tests (each uses its own bucket)."""
    with s3_harness.server(tmp_path_factory.mktemp("versitygw")) as server:
        yield server


def _operator(kubeconfig: str, tmp_path_factory: pytest.TempPathFactory, default_kind: str) -> Iterator[Operator]:
    """The CRDs installed and the operator running as a process until the module is done."""
    with running_operator(kubeconfig, tmp_path_factory.mktemp("operator") / "operator.log", default_kind) as op:
        yield op


@pytest.fixture(scope="module")
def bare_operator(kube_apiserver: Plane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    """The k8s tier's operator: on the bare kube-apiserver, no workload controllers."""
    yield from _operator(kube_apiserver.kubeconfig, tmp_path_factory, "StatefulSet")


@pytest.fixture(scope="module")
def operator(control_plane: Plane, tmp_path_factory: pytest.TempPathFactory,
             request: pytest.FixtureRequest) -> Iterator[Operator]:
    """The e2e tier's operator on the full control plane; a module sets OPERATOR_DEFAULT_KIND
    for the workload kind of clusters that name none (StatefulSet otherwise)."""
    yield from _operator(control_plane.kubeconfig, tmp_path_factory,
                         getattr(request.module, "OPERATOR_DEFAULT_KIND", "StatefulSet"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that runs a real store names its build in its id (`[etcd-3.7.3]`): the default
    build, every supported build (etcd and Xline) for tests marked `lifecycle`, or the default
    build of each engine for tests marked `per_engine`."""
    if "engine_under_test" in metafunc.fixturenames:
        lifecycle = metafunc.definition.get_closest_marker("lifecycle")
        per_engine = metafunc.definition.get_closest_marker("per_engine")
        chosen = engines.LIFECYCLE if lifecycle else engines.PER_ENGINE if per_engine else (engines.DEFAULT,)
        # `lifecycle(needs="hand_off")`: only the builds whose engine has that capability.
        needs = lifecycle.kwargs.get("needs") if lifecycle else None
        if needs:
            chosen = tuple(e for e in chosen if getattr(e.engine.capabilities, needs))
        # `per_engine(having="scratch")`: only the builds whose engine description sets that field.
        having = per_engine.kwargs.get("having") if per_engine else None
        if having:
            chosen = tuple(e for e in chosen if getattr(e.engine, having) is not None)
        metafunc.parametrize("engine_under_test", chosen, ids=[e.label for e in chosen], scope="session")


@pytest.fixture
def engine_ready(engine_under_test: EngineUnderTest) -> EngineUnderTest:
    """The build under test, built if missing; one that cannot be built fails the test, never skips it."""
    try:
        engines.ready(engine_under_test)
    except Exception as exc:  # noqa: BLE001 - a missing engine fails its tests, never skips them
        pytest.fail(f"{engine_under_test.label}: its binaries could not be built or found: {exc}")
    return engine_under_test


TIERS = ("unit", "etcd", "k8s", "e2e", "real")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`make test` selects by tier: a test without one would never run, so refuse it."""
    untiered = [item.nodeid for item in items if not any(item.get_closest_marker(t) for t in TIERS)]
    if untiered:
        raise pytest.UsageError(f"tests without a tier marker {TIERS}: {untiered[:5]}")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`make test` runs `pytest -n 3`: a free worker takes the longest queued work unit, the unit
    tier or a test file (tests/harness/work_units.py). The tests mostly wait on timers (grace
    periods, heartbeats, elections), so more workers than cores still shorten the run."""
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_units.unit_of(nodeid)

        def _assign_work_unit(self, node: object) -> None:
            queued = {unit: len(tests) for unit, tests in self.workqueue.items()}
            self.workqueue.move_to_end(work_units.next_unit(queued), last=False)
            super()._assign_work_unit(node)  # takes the queue's first unit

        def _reschedule(self, node: object) -> None:
            # A worker holds its last test until the next one arrives (pytest's teardown needs the
            # next item), so it commits to its next unit then, not two tests early as xdist would:
            # a long unit taken early could wait while another worker idles.
            if self.workqueue and self._pending_of(self.assigned_work[node]) > 1:
                return
            super()._reschedule(node)

    return WorkUnitScheduling(config, log)


_finished: list[tuple[str, str, float]] = []  # (worker, nodeid, seconds since the session began)
_began = time.monotonic()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """On the xdist controller: when each worker finished each test (work_units.timeline)."""
    worker = getattr(getattr(report, "node", None), "gateway", None)
    if worker is not None and report.when == "teardown":
        _finished.append((worker.id, report.nodeid, time.monotonic() - _began))


def pytest_terminal_summary(terminalreporter: object) -> None:
    if _finished:
        terminalreporter.write_sep("=", "work units per worker")  # type: ignore[attr-defined]
        for line in work_units.timeline(_finished):
            terminalreporter.write_line(line)  # type: ignore[attr-defined]
