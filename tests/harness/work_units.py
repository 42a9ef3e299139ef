"""How `make test`'s two workers share the tests (the policy; tests/conftest.py wires it to xdist).

A work unit is the tests one worker runs in a row. The unit, etcd and k8s tiers and the bench
tests are one unit (`TIERS`): they share a worker's session fixtures (one kube-apiserver, one
versitygw) and run serially, the bench smoke run last. Each e2e file is a unit: its tests share a
module's operator and the worker's control plane, started at the worker's first e2e file.

The first worker takes the tiers, the second the e2e files, longest first. When the tiers are
done while e2e files are still queued, the tiers' worker takes them too, shortest first, on a
control plane of its own, so that the two workers finish close together. Nothing is taken from
the tiers: a worker runs them whole, as before, so a run is never slower than the plain split by
more than one e2e file and a plane's start.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

TIERS = "tiers"
E2E = "tests/e2e/"
# Approximate seconds of each e2e file in CI (warm, 2 cores; from the 40 slowest of `make test`'s
# --durations on 2026-11-27, the shorter tests guessed): they only order the files, so a stale or
# missing entry (DEFAULT_SECONDS) costs balance, never a test.
SECONDS = {
    "tests/e2e/test_fullstack.py": 600,
    "tests/e2e/test_operator.py": 450,
    "tests/e2e/test_quorum_loss_resume.py": 340,
    "tests/e2e/test_campaign.py": 245,  # the campaign's short subset, 4 cases: 243.6 s alone with a plane's start (load 9-15), 2026-11-28
    "tests/e2e/test_tls_rbac.py": 450,  # + the CA rotation through real members (~170 s), 2026-11-28
    "tests/e2e/test_step_guards.py": 240,
    "tests/e2e/test_backups.py": 200,
    "tests/e2e/test_make_run.py": 165,
    "tests/e2e/test_kubectl_plugin.py": 150,  # alone with a plane's start: 143.5 s (load 10), 166.9 s (load 17)
    "tests/e2e/test_quorum_loss_leases_refused.py": 142,
    "tests/e2e/test_install_matrix.py": 45,  # two tests of 21 s (kopf retries shortened), 2026-11-28
    "tests/e2e/test_quorum_loss_survivors.py": 128,
    "tests/e2e/test_repair.py": 100,
    "tests/e2e/test_quorum_loss_silent.py": 85,
    "tests/e2e/test_membership.py": 68,
    "tests/e2e/test_operator_faults.py": 57,
    "tests/e2e/test_left_raft.py": 42,
    "tests/e2e/test_operator_ha.py": 35,
    "tests/e2e/test_helm_install.py": 35,
    "tests/e2e/test_pod_readiness.py": 35,  # one test each, under the 40 slowest's 36 s
    "tests/e2e/test_replace_narration.py": 35,
    "tests/e2e/test_controlplane.py": 30,
}
DEFAULT_SECONDS = 60


def unit_of(nodeid: str) -> str:
    """The work unit a test belongs to: its e2e file, or the tiers."""
    path = nodeid.split("::", 1)[0]
    return path if path.startswith(E2E) else TIERS


def role_of(queued: Collection[str]) -> str:
    """A worker's role, fixed at its first unit: the tiers' worker while the tiers are unclaimed,
    an e2e worker after that."""
    return TIERS if TIERS in queued else E2E


def next_unit(queued: Collection[str], role: str) -> str:
    """The unit a worker of `role` takes next from the queued ones (at least one)."""
    files = sorted((u for u in queued if u != TIERS), key=lambda u: SECONDS.get(u, DEFAULT_SECONDS))
    if role == TIERS:
        return TIERS if TIERS in queued else files[0]
    return files[-1] if files else TIERS


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
