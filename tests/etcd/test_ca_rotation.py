"""A CA rotation with writes flowing: real etcd members over mutual TLS, 0 failed writes.

The material comes from the operator's own code (`rotation.next_phase` decides each phase from
the "Secrets", `certificates.issue` signs), and each phase is rolled as the operator rolls
a new TLS revision: one member at a time, followers first, the leader last, each pod
restarted (not removed) on its new files. Only the members' loopback addresses are added
to the server SANs, as in tests/harness/certs.py. Two clients write, as real clients
would: one on the old CA's client certificate until the leaves are re-issued, one on the
new CA's from then on (after the old CA is dropped, the old client certificate is refused).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from pathlib import Path

import pytest

from raftset.contract import SidecarEnv
from raftset.engines import TLSFiles
from raftset.sidecar.io.etcdclient import ClientTLS
from raftset.operator.pure import certificates as certs
from raftset.operator.pure import rotation
from raftset.operator.pure.certificates import KeyPair, LeafSpec, StoredLeaf
from tests.harness.certs import STEMS
from tests.harness.checker import Writer, check
from tests.harness.lab import Lab
from tests.harness.scenarios import STALL_BOUND_S, grow, restart_in_place

pytestmark = pytest.mark.etcd

Secrets = dict[str, StoredLeaf]


def specs(ips: list[str]) -> dict[str, LeafSpec]:
    return {p: dataclasses.replace(s, ip_addresses=(*s.ip_addresses, *ips)) if s.server_auth else s
            for p, s in certs.leaf_specs("demo", "default", len(ips)).items()}


def write_files(out: Path, secrets: Secrets) -> Path:
    """The pod's projected volume: ca.crt from the server Secret, each leaf's pair."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "ca.crt").write_bytes(secrets[certs.SERVER].ca_pem)
    for purpose, leaf in secrets.items():
        (out / f"{STEMS[purpose]}.crt").write_bytes(leaf.pair.cert_pem)
        (out / f"{STEMS[purpose]}.key").write_bytes(leaf.pair.key_pem)
    return out


def apply(step: rotation.Rotation, secrets: Secrets, ca: KeyPair, wanted: dict[str, LeafSpec]) -> Secrets:
    """What the operator's auto provider writes for one phase."""
    now = datetime.now(timezone.utc)
    out = dict(secrets)
    for purpose, (reissue, trust) in step.writes.items():
        pair = certs.issue(ca, wanted[purpose], now) if reissue else secrets[purpose].pair
        out[purpose] = StoredLeaf(pair, trust, step.revision)
    return out


async def roll(lab: Lab, dirs: dict[int, Path], secrets: Secrets) -> list[int]:
    """Restart every member on the new files: followers (highest ordinal first), the leader last.

    The test's own client (lab.client_tls: leader, membership) takes the new files first, as
    a client that re-reads the client Secret would.
    """
    assert lab.tls_dir is not None
    write_files(Path(lab.tls_dir), secrets)
    leader = await lab.leader_ordinal(0, 1, 2)
    order = sorted(range(3), key=lambda o: (o == leader, -o))
    for ordinal in order:
        write_files(dirs[ordinal], secrets)
        await restart_in_place(lab, ordinal)
    return order


async def test_a_ca_rotation_rolls_three_phases_leader_last_and_fails_no_write(make_lab, tmp_path: Path) -> None:
    client_dir = tmp_path / "client"
    lab: Lab = make_lab(replicas=3, tls_dir=str(client_dir))
    wanted = specs([lab.ip(o) for o in range(3)])
    now = datetime.now(timezone.utc)
    old, new = certs.build_ca("demo-ca", now), certs.build_ca("demo-ca", now)
    secrets: Secrets = {p: StoredLeaf(certs.issue(old, s, now), old.cert_pem, 1) for p, s in wanted.items()}
    dirs = {o: write_files(tmp_path / f"pod-{o}", secrets) for o in range(3)}
    for ordinal, path in dirs.items():
        lab.pod(ordinal).env_extra[SidecarEnv.TLS_DIR] = str(path)
    write_files(client_dir, secrets)
    await grow(lab, 3)
    await lab.move_leader_to(1)
    ids = {m.name: m.id for m in await lab.members(0)}
    urls = [lab.pod(o).client_url for o in range(3)]

    # Phase 1: both CAs trusted, every key pair kept.
    step = rotation.next_phase(new.cert_pem, secrets, rolled=True)
    assert step is not None and step.phase == rotation.TRUST
    secrets = apply(step, secrets, new, wanted)
    old_client = Writer(urls, ClientTLS.load(TLSFiles.under(str(write_files(tmp_path / "c-old", secrets)))))
    old_client.start()
    orders = [await roll(lab, dirs, secrets)]

    # Phase 2: leaves from the new CA; clients pick up the new client certificate.
    step = rotation.next_phase(new.cert_pem, secrets, rolled=True)
    assert step is not None and step.phase == rotation.LEAVES
    secrets = apply(step, secrets, new, wanted)
    new_client = Writer(urls, ClientTLS.load(TLSFiles.under(str(write_files(tmp_path / "c-new", secrets)))))
    new_client.start()
    orders.append(await roll(lab, dirs, secrets))
    old_client.stop()

    # Phase 3: the old CA dropped.
    step = rotation.next_phase(new.cert_pem, secrets, rolled=True)
    assert step is not None and step.phase == rotation.DROP
    secrets = apply(step, secrets, new, wanted)
    orders.append(await roll(lab, dirs, secrets))
    new_client.stop()
    assert rotation.next_phase(new.cert_pem, secrets, rolled=True) is None, "steady on the new CA"

    for name, writer in (("old-CA client", old_client), ("new-CA client", new_client)):
        print(f"{name}: {writer.ok} ok, {writer.failed} failed, longest stall {writer.longest_stall:.3f}s")
        assert writer.failed == 0, (name, writer.errors[-3:])
        assert writer.ok > 20, (name, writer.ok)
        assert writer.longest_stall < STALL_BOUND_S, (name, writer.longest_stall)
    assert orders[0] == [2, 0, 1], "followers first, the leader (ordinal 1) last"
    assert {m.name: m.id for m in await lab.members(0)} == ids, "a restart keeps every member"
    only_new = ClientTLS.load(TLSFiles.under(str(write_files(tmp_path / "c-final", secrets))))
    assert rotation.certs_in(only_new.ca) == [new.cert_pem]
    await check(urls, {**old_client.acked, **new_client.acked}, only_new)
