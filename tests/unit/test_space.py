"""The volume, the backend quota and auto-compaction: a volume holds the quota twice plus headroom."""

from __future__ import annotations

import json

import pytest
from kubernetes.utils.quantity import parse_quantity

from raftset import engines
from raftset.contract import SidecarEnv
from raftset.operator.pure.pod_template import sidecar_env
from raftset.operator.pure import space
from raftset.operator.pure import spec
from tests.unit.builders import body, cluster

pytestmark = pytest.mark.unit

MIB = 1024**2
GIB = 1024**3


@pytest.mark.parametrize(("size", "quota"), [
    ("5Gi", 2304 * MIB),  # the default volume: a little above etcd's own 2 GiB
    ("1Gi", 256 * MIB),
    ("4608Mi", 2 * GIB),
    ("100Gi", 8 * GIB),  # capped at etcd's largest recommended quota
    ("256Mi", 64 * MIB),  # never below the floor
])
def test_quota_for_a_volume(size: str, quota: int) -> None:
    assert space.quota_for(size) == quota


@pytest.mark.parametrize("size", ["1Gi", "5Gi", "10Gi", "64Gi", "1000Gi"])
def test_every_volume_holds_its_own_quota_twice_plus_headroom(size: str) -> None:
    assert space.volume_needed(space.quota_for(size)) <= int(parse_quantity(size))
    assert space.refusal(engines.ETCD, size, space.defaults(engines.ETCD, size), ephemeral=False) is None


def test_the_operator_sets_quota_and_auto_compaction_unless_the_spec_does() -> None:
    def options(c: spec.Cluster) -> dict[str, str]:
        env = {e["name"]: e.get("value") for e in sidecar_env(c)}
        return json.loads(env[SidecarEnv.OPTIONS])

    assert options(cluster()) == {"quota-backend-bytes": str(2304 * MIB), "auto-compaction-mode": "periodic",
                                  "auto-compaction-retention": "60m"}
    assert options(cluster("XlineCluster")) == {"quota": str(2304 * MIB), "auto-compact-mode": "periodic",
                                                "auto-periodic-retention": "60m"}
    mine = options(cluster(options={"quota-backend-bytes": str(GIB), "auto-compaction-retention": "5m"}))
    assert mine["quota-backend-bytes"] == str(GIB) and mine["auto-compaction-retention"] == "5m"


def test_a_quota_the_volume_cannot_hold_is_refused_with_the_size_it_needs() -> None:
    with pytest.raises(spec.InvalidSpec) as refused:
        spec.parse(body(storage={"size": "1Gi"}, options={"quota-backend-bytes": str(2 * GIB)}),
                   default_workload_kind="StatefulSet")
    assert refused.value.reason == "StorageTooSmall" and "4608Mi" in str(refused.value)
    assert space.refusal(engines.ETCD, "5Gi", {"quota-backend-bytes": str(2 * GIB)}, ephemeral=False) is None
    assert space.refusal(engines.ETCD, "1Gi", {"quota-backend-bytes": str(2 * GIB)}, ephemeral=True) is None
    assert "number of bytes" in (space.refusal(engines.ETCD, "5Gi", {"quota-backend-bytes": "2G"},
                                               ephemeral=False) or "")


def test_the_engine_reads_back_the_quota_it_runs_with() -> None:
    assert engines.ETCD.quota({}) == 2 * GIB and engines.XLINE.quota({}) == 8 * GIB
    assert engines.ETCD.quota({"quota-backend-bytes": "1024"}) == 1024
    assert engines.ETCD.quota({"quota-backend-bytes": "lots"}) == 2 * GIB
