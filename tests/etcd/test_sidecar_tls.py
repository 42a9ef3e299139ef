"""The whole lifecycle over mutual TLS: join, promote, hand-off and removal with https URLs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from raftset.sidecar.io.etcdclient import EtcdClientError, MemberClient
from tests.harness.certs import write_tls_dir
from tests.harness.lab import Lab
from tests.harness.scenarios import grow
from tests.harness.scenarios import STALL_BOUND_S, scale_in_under_writer

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


async def test_a_client_without_a_certificate_is_refused(make_lab, tmp_path: Path) -> None:
    lab: Lab = make_lab(replicas=1, tls_dir=str(tmp_path / "tls"))
    write_tls_dir(tmp_path / "tls", [lab.ip(0)])
    await grow(lab, 1)
    url = lab.pod(0).client_url
    async with MemberClient(url, lab.client_tls(), timeout=3) as with_cert:
        assert len(await with_cert.member_list()) == 1
    ca_only = dataclasses.replace(lab.client_tls(), cert=None, key=None)  # trusts the CA, shows no certificate
    with pytest.raises(EtcdClientError):
        async with MemberClient(url, ca_only, timeout=3) as anonymous:
            await anonymous.member_list()
    with pytest.raises(EtcdClientError):
        async with MemberClient(url.replace("https://", "http://"), None, timeout=3) as plain:
            await plain.member_list()
