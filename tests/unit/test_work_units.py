"""`make test`'s work units: what runs on one worker in a row (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import E2E_SECOND_HALF, work_unit

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parents[1]


def test_every_file_of_the_second_e2e_half_exists() -> None:
    """A renamed file would silently move to the first half and unbalance the two."""
    assert E2E_SECOND_HALF <= {p.name for p in (TESTS / "e2e").glob("test_*.py")}


@pytest.mark.parametrize(("nodeid", "unit"), [
    ("tests/e2e/test_fullstack.py::test_x[etcd-3.7.3]", "e2e-1"),
    ("tests/e2e/test_backups.py::test_y[etcd-3.7.3-StatefulSet]", "e2e-2"),
    ("tests/k8s/test_validation.py::test_z", "k8s"),
    ("tests/unit/test_planner.py::test_a", "unit"),
    ("tests/etcd/test_sidecar_join.py::test_b[etcd-3.5.35]", "tests/etcd/test_sidecar_join.py"),
    ("tests/bench/test_smoke.py::test_c[etcd-3.7.3]", "tests/bench/test_smoke.py"),
])
def test_a_test_belongs_to_its_work_unit(nodeid: str, unit: str) -> None:
    assert work_unit(nodeid) == unit


def test_both_e2e_halves_are_used() -> None:
    halves = {work_unit(f"tests/e2e/{p.name}::t") for p in (TESTS / "e2e").glob("test_*.py")}
    assert halves == {"e2e-1", "e2e-2"}
