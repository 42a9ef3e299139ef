"""The whole lifecycle over mutual TLS: join, promote, hand-off and removal with https URLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.etcd.certs import write_tls_dir
from tests.etcd.harness import Lab
from tests.etcd.test_sidecar_leave import STALL_BOUND_S, scale_in_under_writer

pytestmark = pytest.mark.etcd


async def test_tls_cluster_grows_and_scales_in_its_leader(make_lab, tmp_path: Path) -> None:
    lab: Lab = make_lab(replicas=3, tls_dir=str(tmp_path / "tls"))
    write_tls_dir(tmp_path / "tls", [lab.ip(o) for o in range(3)])
    result, writer = await scale_in_under_writer(lab, leader=2)
    assert lab.pod(0).client_url.startswith("https://")
    config = (lab.pod(2).run_dir / "etcd.conf.yaml").read_text()
    assert "client-cert-auth: true" in config and "https://" in config
    assert result["removed"] and result["moved_leader_to"] is not None, result
    assert writer.failed == 0, writer.errors[:5]
    assert writer.longest_stall < STALL_BOUND_S
