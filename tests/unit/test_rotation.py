"""Hitless CA rotation: the phases read back from the Secrets, and the auto provider walking them."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import pytest

from raftset.operator.pure import certificates as certs
from raftset.operator.components import tls
from raftset.operator.components.workload import workload_manifest
from raftset.operator.pure import rotation
from raftset.operator.pure.certificates import KeyPair, StoredLeaf
from tests.unit.builders import NOW, cluster
from tests.unit.test_tls_manifests import MemoryAPI, member_pod

pytestmark = pytest.mark.unit

SPECS = certs.leaf_specs("kv", "db", 3)
OLD, NEW = certs.build_ca("old-ca", NOW), certs.build_ca("new-ca", NOW)


def leaves_of(ca: KeyPair, trust: bytes, revision: int = 1) -> dict[str, StoredLeaf | None]:
    return {p: StoredLeaf(certs.issue(ca, spec, NOW), trust, revision) for p, spec in SPECS.items()}


BOTH = rotation.bundle(OLD.cert_pem, NEW.cert_pem)


def test_bundles_keep_order_and_drop_duplicates() -> None:
    assert rotation.certs_in(BOTH) == [OLD.cert_pem, NEW.cert_pem]
    assert rotation.bundle(BOTH, NEW.cert_pem, OLD.cert_pem) == BOTH
    assert rotation.certs_in(b"") == []


def test_steady_state_is_no_rotation() -> None:
    assert rotation.next_phase(OLD.cert_pem, leaves_of(OLD, OLD.cert_pem), rolled=True) is None


def test_a_missing_leaf_is_left_to_issuance() -> None:
    leaves = leaves_of(OLD, OLD.cert_pem)
    leaves[certs.CLIENT] = None
    assert rotation.next_phase(NEW.cert_pem, leaves, rolled=True) is None


@pytest.mark.parametrize("rolled", [True, False])
def test_phase_1_trusts_both_cas_and_keeps_every_key_pair(rolled: bool) -> None:
    """Needs no finished roll: it starts the rotation."""
    step = rotation.next_phase(NEW.cert_pem, leaves_of(OLD, OLD.cert_pem, revision=4), rolled)
    assert step is not None and step.phase == rotation.TRUST and step.revision == 5
    assert step.writes == {p: (False, BOTH) for p in certs.PURPOSES}


def test_phase_2_waits_for_the_roll_then_reissues_from_the_new_ca() -> None:
    leaves = leaves_of(OLD, BOTH, revision=5)
    waiting = rotation.next_phase(NEW.cert_pem, leaves, rolled=False)
    assert waiting is not None and (waiting.phase, waiting.revision, waiting.writes) == (rotation.WAIT, 5, {})
    step = rotation.next_phase(NEW.cert_pem, leaves, rolled=True)
    assert step is not None and step.phase == rotation.LEAVES and step.revision == 6
    assert step.writes == {p: (True, BOTH) for p in certs.PURPOSES}


def test_phase_3_waits_for_the_roll_then_drops_the_old_ca() -> None:
    leaves = leaves_of(NEW, BOTH, revision=6)
    assert rotation.next_phase(NEW.cert_pem, leaves, rolled=False).phase == rotation.WAIT
    step = rotation.next_phase(NEW.cert_pem, leaves, rolled=True)
    assert step is not None and step.phase == rotation.DROP and step.revision == 7
    assert step.writes == {p: (False, NEW.cert_pem) for p in certs.PURPOSES}
    done = {p: StoredLeaf(leaf.pair, NEW.cert_pem, 7) for p, leaf in leaves.items() if leaf}
    assert rotation.next_phase(NEW.cert_pem, done, rolled=True) is None


def test_a_partly_reissued_set_finishes_phase_2_only_for_the_rest() -> None:
    leaves = leaves_of(OLD, BOTH, revision=5)
    leaves[certs.PEER] = StoredLeaf(certs.issue(NEW, SPECS[certs.PEER], NOW), BOTH, 6)
    step = rotation.next_phase(NEW.cert_pem, leaves, rolled=True)
    assert step is not None and set(step.writes) == {certs.SERVER, certs.CLIENT} and step.revision == 7


# --- the auto provider walking the phases ---------------------------------------------------------

def workload_running(api: MemoryAPI, c: Any, revision: str, *, updated: int = 3) -> dict[str, Any]:
    """The live workload: template on `revision`, `updated` of 3 pods on it (in `api`), the others on
    the revision before, all ready."""
    w = workload_manifest(c, 3, tls_revision=revision)
    w["metadata"]["generation"] = 7
    w["status"] = {"observedGeneration": 7, "replicas": 3, "updatedReplicas": updated, "readyReplicas": 3}
    api.pods = [member_pod(o, revision if o < updated else str(int(revision) - 1)) for o in range(3)]
    return w


def mounted(api: MemoryAPI) -> dict[str, tuple[bytes, bytes]]:
    """purpose -> (tls.crt, ca.crt) as the pods would mount them."""
    out = {}
    for p in certs.PURPOSES:
        data = api.secret(f"demo-{p}-tls")["data"]
        out[p] = (base64.b64decode(data["tls.crt"]), base64.b64decode(data["ca.crt"]))
    return out


async def test_a_deleted_ca_rotates_in_three_rolled_phases() -> None:
    api, c = MemoryAPI(), cluster()
    assert (await tls.ensure_tls(api, c, NOW)).revision == "1"
    old_ca = base64.b64decode(api.secret("demo-ca")["data"]["tls.crt"])
    first = mounted(api)
    del api.objects[("v1", "Secret", "db", "demo-ca")]  # the user asks for a new CA

    # Phase 1: a new CA, the old leaves kept, both CAs trusted.
    state = await tls.ensure_tls(api, c, NOW, workload=workload_running(api, c, "1"))
    assert state.revision == "2"
    new_ca = base64.b64decode(api.secret("demo-ca")["data"]["tls.crt"])
    assert new_ca != old_ca
    for p, (cert, trust) in mounted(api).items():
        assert cert == first[p][0] and rotation.certs_in(trust) == [old_ca, new_ca]
    # The roll of phase 1 has not finished: nothing moves.
    assert (await tls.ensure_tls(api, c, NOW, workload=workload_running(api, c, "2", updated=1))).revision == "2"
    assert (await tls.ensure_tls(api, c, NOW, workload=workload_running(api, c, "1"))).revision == "2"

    # Phase 2: leaves from the new CA, both still trusted.
    assert (await tls.ensure_tls(api, c, NOW, workload=workload_running(api, c, "2"))).revision == "3"
    for cert, trust in mounted(api).values():
        assert certs.signed_by(cert, new_ca) and rotation.certs_in(trust) == [old_ca, new_ca]

    # Phase 3: the old CA dropped; then steady.
    assert (await tls.ensure_tls(api, c, NOW, workload=workload_running(api, c, "3"))).revision == "4"
    for cert, trust in mounted(api).values():
        assert certs.signed_by(cert, new_ca) and trust == new_ca
    api.applied.clear()
    assert (await tls.ensure_tls(api, c, NOW, workload=workload_running(api, c, "4"))).revision == "4"
    assert api.applied == []


async def test_an_expiring_ca_rotates_the_same_way() -> None:
    api, c = MemoryAPI(), cluster()
    await tls.ensure_tls(api, c, NOW)
    later = NOW + certs.CA_LIFETIME - timedelta(days=10)
    assert (await tls.ensure_tls(api, c, later, workload=workload_running(api, c, "1"))).revision == "2"
    trusts = {len(rotation.certs_in(trust)) for _, trust in mounted(api).values()}
    assert trusts == {2}
