"""Nothing to join or bad certificates: a clear error, backoff, readiness false, no crash loop."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.harness.lab import http_get, wait_for

pytestmark = pytest.mark.etcd


def join_attempts(metrics: str) -> int:
    match = re.search(r"^raftset_sidecar_join_attempts_total(?:\{[^}]*\})? ([0-9.e+]+)$", metrics, re.M)
    assert match, metrics
    return int(float(match.group(1)))


def assert_waits_with_backoff(pod, error_fragment: str, seconds: float = 7.0) -> None:
    start = time.monotonic()
    wait_for(lambda: error_fragment in http_get(f"{pod.sidecar_url}/startup")[1], 15, f"error {error_fragment!r}")
    time.sleep(max(0.0, seconds - (time.monotonic() - start)))
    code, body = http_get(f"{pod.sidecar_url}/startup")
    assert code == 503 and error_fragment in body, body
    assert http_get(f"{pod.sidecar_url}/readyz")[0] == 503
    assert http_get(f"{pod.sidecar_url}/livez")[0] == 200
    assert pod.sidecar.poll() is None, "the sidecar must not exit (no crash loop)"
    # 0.5 + 1 + 2 + 4 s of backoff: a handful of attempts, not one per tick.
    attempts = join_attempts(http_get(f"{pod.sidecar_url}/metrics")[1])
    assert 2 <= attempts <= 8, attempts


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
