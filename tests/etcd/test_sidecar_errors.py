"""Nothing to join or bad certificates: a clear error, backoff, readiness false, no crash loop."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pytest

from tests.harness.lab import Pod, http_get, wait_for

pytestmark = pytest.mark.etcd


# The joiner logs the delay it chose before each wait (joiner.py), with the log's timestamp.
BACKOFF_LINE = re.compile(r"^(\S+ \S+) INFO raftset\.sidecar: join: no progress; next attempt in ([0-9.]+) s$", re.M)
INITIAL_S, CAP_S, JITTER = 0.5, 10.0, 0.2  # plumbing.Backoff as the joiner makes it
ROUNDING_S = 0.01  # the delay is logged to 10 ms, its time to 1 ms


def join_attempts(metrics: str) -> int:
    match = re.search(r"^raftset_sidecar_join_attempts_total(?:\{[^}]*\})? ([0-9.e+]+)$", metrics, re.M)
    assert match, metrics
    return int(float(match.group(1)))


def join_backoff(pod: Pod) -> list[tuple[float, float]]:
    """(when, chosen delay) of each join attempt that made no progress, from the sidecar's log."""
    return [(datetime.strptime(when, "%Y-%m-%d %H:%M:%S,%f").timestamp(), float(delay))
            for when, delay in BACKOFF_LINE.findall(pod.log_text())]


def assert_waits_with_backoff(pod: Pod, error_fragment: str, attempts: int = 5) -> None:
    """The join keeps failing with `error_fragment`, and waits a capped, doubling delay between its
    attempts: the shape is read from the delays the sidecar chose and the times it logged them, so a
    slow machine (fewer attempts in a fixed window) cannot fail it, and attempts 'one per tick' can."""
    wait_for(lambda: error_fragment in http_get(f"{pod.sidecar_url}/startup")[1], 15, f"error {error_fragment!r}")
    wait_for(lambda: len(join_backoff(pod)) >= attempts, 60, f"{attempts} join attempts without progress")
    code, body = http_get(f"{pod.sidecar_url}/startup")
    assert code == 503 and error_fragment in body, body
    assert http_get(f"{pod.sidecar_url}/readyz")[0] == 503
    assert http_get(f"{pod.sidecar_url}/livez")[0] == 200
    assert pod.sidecar.poll() is None, "the sidecar must not exit (no crash loop)"
    backoff = join_backoff(pod)
    delays = [delay for _, delay in backoff]
    for i, delay in enumerate(delays):
        nominal = min(INITIAL_S * 2 ** i, CAP_S)
        assert (1 - JITTER) * nominal - ROUNDING_S <= delay <= (1 + JITTER) * nominal + ROUNDING_S, delays
    gaps = [later - earlier for (earlier, _), (later, _) in zip(backoff, backoff[1:])]
    assert all(gap >= delay - ROUNDING_S for gap, delay in zip(gaps, delays)), \
        f"an attempt came before its backoff ran out: gaps {gaps}, delays {delays}"
    assert join_attempts(http_get(f"{pod.sidecar_url}/metrics")[1]) >= len(backoff)


async def test_unreachable_peers_give_a_clear_error_and_backoff(make_lab) -> None:
    lab = make_lab(replicas=3)
    pod = lab.pod(1)
    lab.create_pod(1)
    pod.start_sidecar()
    assert_waits_with_backoff(pod, "waiting for the first member (ordinal 0)")
    assert not (pod.run_dir / "etcd.conf.yaml").exists()


async def test_bad_tls_files_give_a_clear_error_and_backoff(make_lab, tmp_path: Path) -> None:
    tls = tmp_path / "tls"
    tls.mkdir()
    for name in ("ca.crt", "server.crt", "server.key", "peer.crt", "peer.key", "client.crt"):
        (tls / name).write_text("not a certificate\n")
    lab = make_lab(replicas=1, tls_dir=str(tls))
    pod = lab.pod(0)
    lab.create_pod(0)
    pod.start_sidecar()
    assert_waits_with_backoff(pod, "bad TLS material")
    body = http_get(f"{pod.sidecar_url}/startup")[1]
    assert f"{tls}/ca.crt" in body or f"{tls}/client.key" in body
    assert "bad TLS material" in pod.sidecar_log.read_text()
