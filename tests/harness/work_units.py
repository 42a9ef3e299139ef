"""How `make test`'s two workers share the tests (the policy; tests/conftest.py wires it to xdist).

A work unit is the tests one worker runs in a row. The unit, etcd and k8s tiers are one unit
(`TIERS`): they share a worker's session fixtures (one kube-apiserver, one versitygw) and run
serially. Each e2e file is a unit: its tests share a module's operator and the worker's control
plane, started at the worker's first e2e file. Two long tests start their own planes, so they are
units of their own that either worker can take (`STANDALONE`).

The first worker takes the tiers, the second the e2e files, longest first. A worker that runs out
takes a standalone unit; the tiers' worker then takes e2e files shortest first, so that the two
finish close together: it starts a second control plane only for the run's last files.
"""

from __future__ import annotations

from collections.abc import Collection

TIERS = "tiers"
E2E = "tests/e2e/"
# These start every process they need (the bench's planes, `make run`'s), using no session fixture.
STANDALONE = frozenset({"tests/bench/test_smoke.py", "tests/e2e/test_make_run.py"})
# Approximate seconds of each unit in CI (warm, 2 cores; from the 40 slowest of `make test`'s
# --durations on 2026-11-27, the shorter tests guessed): they only order the units, so a stale or
# missing entry (DEFAULT_SECONDS) costs balance, never a test.
SECONDS = {
    "tests/bench/test_smoke.py": 353,
    "tests/e2e/test_make_run.py": 165,
    "tests/e2e/test_fullstack.py": 600,
    "tests/e2e/test_operator.py": 450,
    "tests/e2e/test_quorum_loss_resume.py": 340,
    "tests/e2e/test_tls_rbac.py": 270,
    "tests/e2e/test_step_guards.py": 240,
    "tests/e2e/test_backups.py": 200,
    "tests/e2e/test_quorum_loss_leases_refused.py": 142,
    "tests/e2e/test_repair.py": 100,
    "tests/e2e/test_quorum_loss_silent.py": 85,
    "tests/e2e/test_membership.py": 68,
    "tests/e2e/test_operator_faults.py": 57,
    "tests/e2e/test_left_raft.py": 42,
    "tests/e2e/test_operator_ha.py": 35,
    "tests/e2e/test_controlplane.py": 30,
}
DEFAULT_SECONDS = 60


def unit_of(nodeid: str) -> str:
    """The work unit a test belongs to."""
    path = nodeid.split("::", 1)[0]
    return path if path in STANDALONE or path.startswith(E2E) else TIERS


def _e2e(unit: str) -> bool:
    return unit.startswith(E2E) and unit not in STANDALONE


def _seconds(unit: str) -> int:
    return SECONDS.get(unit, DEFAULT_SECONDS)


def role_of(queued: Collection[str]) -> str:
    """A worker's role, fixed at its first unit: the tiers' worker while the tiers are unclaimed,
    an e2e worker after that."""
    return TIERS if TIERS in queued else E2E


def next_unit(queued: Collection[str], role: str) -> str:
    """The unit a worker of `role` takes next from the queued ones (at least one)."""
    e2e = sorted((u for u in queued if _e2e(u)), key=_seconds)
    rest = sorted((u for u in queued if not _e2e(u)), key=lambda u: (u != TIERS, -_seconds(u)))
    if role == E2E:
        return e2e[-1] if e2e else rest[0]
    return rest[0] if rest else e2e[0]
