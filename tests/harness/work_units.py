"""How `make test`'s workers share the tests (the policy; tests/conftest.py wires it to xdist).

A work unit is the tests one worker runs in a row: the unit tier whole (quick, and one import of
everything), and every other test file on its own. A worker's session fixtures (a bare
kube-apiserver, a versitygw, a full control plane) start at its first test that asks for them, so
any worker can take any unit; an e2e file's tests share a module's operator.

Whenever a worker is free it takes the longest queued unit (longest processing time first): the
long e2e files start at once and the short files fill the ends, so the workers finish close
together. A unit's length is its measured seconds in CI where known (`SECONDS`), else an estimate
from its number of tests: a stale or missing entry costs balance, never a test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

UNIT_TIER = "tests/unit/"
# Seconds of each unit in CI (warm, 2 cores, `make test`'s timeline of 2026-11-27: the e2e files;
# the tiers' files estimated until the per-file timeline measures them).
SECONDS = {
    UNIT_TIER: 90,
    "tests/bench/test_smoke.py": 290,
    "tests/e2e/test_fullstack.py": 780,
    "tests/e2e/test_operator.py": 120,
    "tests/e2e/test_quorum_loss_resume.py": 340,
    "tests/e2e/test_tls_rbac.py": 210,
    "tests/e2e/test_step_guards.py": 250,
    "tests/e2e/test_backups.py": 230,
    "tests/e2e/test_make_run.py": 210,
    "tests/e2e/test_kubectl_plugin.py": 45,
    "tests/e2e/test_quorum_loss_leases_refused.py": 153,
    "tests/e2e/test_install_matrix.py": 43,
    "tests/e2e/test_quorum_loss_survivors.py": 120,
    "tests/e2e/test_repair.py": 100,
    "tests/e2e/test_quorum_loss_silent.py": 95,
    "tests/e2e/test_membership.py": 55,
    "tests/e2e/test_operator_faults.py": 40,
    "tests/e2e/test_left_raft.py": 41,
    "tests/e2e/test_operator_ha.py": 37,
    "tests/e2e/test_helm_install.py": 21,
    "tests/e2e/test_pod_readiness.py": 27,
    "tests/e2e/test_replace_narration.py": 41,
    "tests/e2e/test_controlplane.py": 30,
    "tests/etcd/test_backups.py": 300,
}
# Seconds per test of a file missing from `SECONDS`, by the folder it is in.
PER_TEST_SECONDS = {"tests/e2e/": 45, "tests/etcd/": 12, "tests/k8s/": 8}
DEFAULT_PER_TEST_SECONDS = 10


def unit_of(nodeid: str) -> str:
    """The work unit a test belongs to: the unit tier, or its file."""
    path = nodeid.split("::", 1)[0]
    return UNIT_TIER if path.startswith(UNIT_TIER) else path


def estimate(unit: str, tests: int) -> float:
    """A unit's expected seconds: measured, or by its folder's pace per test."""
    if unit in SECONDS:
        return SECONDS[unit]
    folder = next((f for f in PER_TEST_SECONDS if unit.startswith(f)), "")
    return tests * PER_TEST_SECONDS.get(folder, DEFAULT_PER_TEST_SECONDS)


def next_unit(queued: Mapping[str, int]) -> str:
    """The unit a free worker takes next: the longest of the queued ones (unit → its number of tests)."""
    return max(queued, key=lambda unit: (estimate(unit, queued[unit]), unit))


def spans(finished: Iterable[tuple[str, str, float]]) -> dict[str, list[tuple[str, float, float]]]:
    """Per worker, the units it ran in order with their first and last finish times, from
    (worker, nodeid, seconds since the session began) in the order the reports came in."""
    by_worker: dict[str, list[tuple[str, float, float]]] = {}
    for worker, nodeid, at in finished:
        runs = by_worker.setdefault(worker, [])
        unit = unit_of(nodeid)
        if runs and runs[-1][0] == unit:
            runs[-1] = (unit, runs[-1][1], at)
        else:
            runs.append((unit, runs[-1][2] if runs else 0.0, at))
    return by_worker


def timeline(finished: Iterable[tuple[str, str, float]]) -> list[str]:
    """`make test`'s closing lines: when each worker ran what, so the next balancing has numbers."""
    lines = []
    for worker, runs in sorted(spans(finished).items()):
        lines.append(f"{worker}: done at {runs[-1][2]:.0f} s")
        lines += [f"  {start:6.0f}-{end:6.0f} s  {unit}" for unit, start, end in runs]
    return lines
