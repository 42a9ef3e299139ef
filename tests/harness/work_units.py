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
# Seconds of each unit in CI: `make test`'s timeline of 2026-11-29 (rehearsal ci30: three workers,
# 2 cores, the real tier on one of them); they only order the units.
SECONDS = {
    REAL_TIER: 1950,  # ci30 measured 1766; the Advanced StatefulSet test added since: about 180 s
    "tests/e2e/test_fullstack.py": 798,
    "tests/etcd/test_sidecar_join.py": 428,
    "tests/e2e/test_quorum_loss_resume.py": 413,
    "tests/bench/test_smoke.py": 320,
    "tests/etcd/test_backups.py": 303,
    "tests/e2e/test_step_guards.py": 269,
    "tests/e2e/test_tls_rbac.py": 229,
    "tests/etcd/test_sidecar_leave.py": 220,
    "tests/e2e/test_make_run.py": 201,
    "tests/e2e/test_backups.py": 189,
    "tests/etcd/test_readiness_catch_up.py": 178,
    "tests/e2e/test_campaign.py": 175,
    "tests/etcd/test_repair.py": 173,
    "tests/e2e/test_quorum_loss_leases_refused.py": 152,
    "tests/e2e/test_quorum_loss_survivors.py": 142,
    "tests/etcd/test_fault_catalog.py": 138,
    "tests/k8s/test_install_matrix.py": 133,
    "tests/etcd/test_sidecar_clean.py": 124,
    "tests/e2e/test_operator.py": 118,
    "tests/etcd/test_quorum_loss.py": 109,
    "tests/e2e/test_repair.py": 104,
    "tests/etcd/test_scratch.py": 103,
    "tests/etcd/test_faults.py": 96,
    "tests/e2e/test_quorum_loss_silent.py": 91,
    "tests/etcd/test_hash_check.py": 84,
    "tests/etcd/test_corrupt_alarm.py": 76,
    "tests/etcd/test_engine_differences.py": 62,
    "tests/etcd/test_lights_out.py": 61,
    "tests/etcd/test_ca_rotation.py": 61,
    "tests/etcd/test_quorum_evidence.py": 56,
    "tests/e2e/test_install_matrix.py": 56,
    "tests/e2e/test_membership.py": 52,
    "tests/e2e/test_kubectl_plugin.py": 50,
    "tests/e2e/test_roll_stuck.py": 48,
    "tests/e2e/test_operator_ha.py": 48,
    "tests/k8s/test_sidecar_heartbeat.py": 45,
    "tests/etcd/test_zone_latency.py": 45,
    "tests/k8s/test_operator_api.py": 42,
    "tests/e2e/test_replace_narration.py": 41,
    "tests/e2e/test_left_raft.py": 40,
    "tests/e2e/test_operator_faults.py": 34,
    "tests/etcd/test_space.py": 34,
    "tests/etcd/test_linearizability.py": 31,
    "tests/k8s/test_devcluster_stop.py": 30,
    "tests/etcd/test_membership.py": 30,
    UNIT_TIER: 29,
    "tests/etcd/test_checker.py": 28,
    "tests/etcd/test_available_follows_reads.py": 27,
    "tests/e2e/test_pod_readiness.py": 26,
    "tests/etcd/test_membership_lock.py": 22,
    "tests/etcd/test_sidecar_errors.py": 19,
    "tests/etcd/test_sidecar_tls.py": 19,
    "tests/k8s/test_validation.py": 17,
    "tests/k8s/test_operator_events.py": 16,
    "tests/e2e/test_helm_install.py": 16,
    "tests/k8s/test_status_causes.py": 15,
    "tests/etcd/test_engine_builds.py": 13,
    "tests/k8s/test_operator_kube_client.py": 12,
    "tests/etcd/test_sidecar_supervision.py": 11,
    "tests/k8s/test_helm_chart.py": 10,
    "tests/etcd/test_monitoring_rules.py": 8,
    "tests/k8s/test_operator_election.py": 8,
    "tests/e2e/test_controlplane.py": 8,
    "tests/k8s/test_operator_lease_watch.py": 7,
    "tests/k8s/test_operator_faults.py": 6,
    "tests/k8s/test_backup_status.py": 5,
    "tests/bench/test_backup_math.py": 4,
    "tests/k8s/test_controlplane.py": 3,
    "tests/bench/test_report.py": 3,
    "tests/k8s/test_podrunner_mounts.py": 3,
    "tests/k8s/test_podrunner_not_run.py": 1,
    "tests/bench/test_stats_extensions.py": 1,
    "tests/bench/test_rolls.py": 1,
    "tests/bench/test_operator_cost.py": 1,
    "tests/etcd/test_excused_loss.py": 1,
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
