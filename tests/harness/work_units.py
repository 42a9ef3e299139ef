"""How `make test`'s workers share the tests (the policy; tests/conftest.py wires it to xdist).

A work unit is the tests one worker runs in a row: the unit tier whole (quick, and one import of
everything), the real tier whole (its labs run one at a time: three kubelets and their containerds
are all the two cores can spare, and two labs at once can exhaust the host's inotify instances),
and every other test file on its own. A worker's session fixtures (a bare
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
REAL_TIER = "tests/real/"
WHOLE_TIERS = (UNIT_TIER, REAL_TIER)
# Seconds of each unit in CI: `make test`'s timeline of 2026-11-28 (three workers, 2 cores, a load
# of 5 to 14); they only order the units.
SECONDS = {
    REAL_TIER: 2100,  # its scenarios measured one lab at a time (2026-11-29); to be read from CI
    "tests/e2e/test_fullstack.py": 862,
    "tests/etcd/test_sidecar_join.py": 419,
    "tests/e2e/test_quorum_loss_resume.py": 403,
    "tests/e2e/test_campaign.py": 245,  # the short subset: 4 cases, 216.6-243.6 s alone with a plane's start
    "tests/etcd/test_backups.py": 348,
    "tests/bench/test_smoke.py": 346,
    "tests/e2e/test_step_guards.py": 285,
    "tests/e2e/test_backups.py": 273,
    "tests/e2e/test_make_run.py": 260,
    "tests/e2e/test_tls_rbac.py": 251,
    "tests/etcd/test_sidecar_leave.py": 215,
    "tests/etcd/test_repair.py": 188,
    "tests/k8s/test_install_matrix.py": 174,
    "tests/e2e/test_operator.py": 164,
    "tests/e2e/test_quorum_loss_leases_refused.py": 159,
    "tests/e2e/test_quorum_loss_survivors.py": 153,
    "tests/etcd/test_fault_catalog.py": 139,
    "tests/etcd/test_sidecar_clean.py": 136,
    "tests/e2e/test_repair.py": 118,
    "tests/etcd/test_quorum_loss.py": 111,
    "tests/e2e/test_quorum_loss_silent.py": 108,
    "tests/etcd/test_faults.py": 102,
    "tests/etcd/test_corrupt_alarm.py": 77,
    "tests/etcd/test_ca_rotation.py": 75,
    "tests/e2e/test_operator_faults.py": 66,
    "tests/etcd/test_lights_out.py": 64,
    "tests/etcd/test_engine_differences.py": 63,
    "tests/e2e/test_left_raft.py": 61,
    "tests/e2e/test_membership.py": 60,
    "tests/etcd/test_quorum_evidence.py": 56,
    "tests/etcd/test_hash_check.py": 54,
    "tests/e2e/test_install_matrix.py": 52,
    "tests/e2e/test_operator_ha.py": 52,
    "tests/e2e/test_kubectl_plugin.py": 51,
    "tests/k8s/test_sidecar_heartbeat.py": 49,
    "tests/e2e/test_replace_narration.py": 49,
    "tests/etcd/test_zone_latency.py": 47,
    "tests/k8s/test_devcluster_stop.py": 44,
    UNIT_TIER: 34,
    "tests/etcd/test_space.py": 32,
    "tests/etcd/test_membership.py": 31,
    "tests/etcd/test_linearizability.py": 31,
    "tests/k8s/test_status_causes.py": 30,
    "tests/e2e/test_pod_readiness.py": 30,
    "tests/k8s/test_validation.py": 30,
    "tests/etcd/test_membership_lock.py": 25,
    "tests/e2e/test_helm_install.py": 25,
    "tests/etcd/test_checker.py": 24,
    "tests/k8s/test_operator_api.py": 24,
    "tests/etcd/test_monitoring_rules.py": 21,
    "tests/etcd/test_sidecar_tls.py": 20,
    "tests/etcd/test_available_follows_reads.py": 20,
    "tests/etcd/test_sidecar_errors.py": 19,
    "tests/k8s/test_backup_status.py": 18,
    "tests/e2e/test_controlplane.py": 16,
    "tests/etcd/test_sidecar_supervision.py": 14,
    "tests/k8s/test_operator_faults.py": 11,
    "tests/k8s/test_operator_election.py": 9,
    "tests/etcd/test_engine_builds.py": 8,
    "tests/k8s/test_helm_chart.py": 5,
    "tests/k8s/test_podrunner_mounts.py": 3,
    "tests/k8s/test_podrunner_not_run.py": 2,
    "tests/bench/test_report.py": 1,
    "tests/k8s/test_controlplane.py": 1,
    "tests/bench/test_operator_cost.py": 1,
    "tests/bench/test_stats_extensions.py": 1,
    "tests/bench/test_rolls.py": 1,
    "tests/bench/test_backup_math.py": 1,
}
# Seconds per test of a file missing from `SECONDS`, by the folder it is in.
PER_TEST_SECONDS = {"tests/e2e/": 45, "tests/etcd/": 12, "tests/k8s/": 8}
DEFAULT_PER_TEST_SECONDS = 10


def unit_of(nodeid: str) -> str:
    """The work unit a test belongs to: the unit or the real tier, or its file."""
    path = nodeid.split("::", 1)[0]
    return next((tier for tier in WHOLE_TIERS if path.startswith(tier)), path)


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
    """`make test`'s closing lines: when each worker ran what, so the next balancing has numbers,
    and the real tier's own time (its budget is watched: docs/devcluster.md)."""
    lines = []
    real = []
    for worker, runs in sorted(spans(finished).items()):
        lines.append(f"{worker}: done at {runs[-1][2]:.0f} s")
        lines += [f"  {start:6.0f}-{end:6.0f} s  {unit}" for unit, start, end in runs]
        real += [end - start for unit, start, end in runs if unit == REAL_TIER]
    if real:
        lines.append(f"real tier: {sum(real):.0f} s ({REAL_TIER}, one worker)")
    return lines
