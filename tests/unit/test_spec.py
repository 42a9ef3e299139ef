"""spec.parse: defaults, the workload kind's precedence, and bad specs refused with the field named."""

from __future__ import annotations

from typing import Any

import pytest

from raftset import contract
from raftset.engines import ETCD, XLINE
from raftset.operator.pure.spec import DEFAULT_SIDECAR_IMAGE, InvalidSpec, Storage, parse
from raftset.workloads import ADVANCED_STATEFULSET, STATEFULSET
from tests.unit.builders import body

pytestmark = pytest.mark.unit

KINDS = [pytest.param(contract.KIND_ETCD, id="etcd"), pytest.param(contract.KIND_XLINE, id="xline")]


def parse_body(obj: dict[str, Any], default: str = "StatefulSet"):
    return parse(obj, default_workload_kind=default)


@pytest.mark.parametrize("kind", KINDS)
def test_defaults(kind: str) -> None:
    cluster = parse_body(body(kind))
    engine = ETCD if kind == contract.KIND_ETCD else XLINE
    assert (cluster.name, cluster.namespace, cluster.uid, cluster.generation) == ("demo", "db", "0b1c2d3e-uid", 4)
    assert cluster.engine is engine
    assert cluster.backend is STATEFULSET
    assert cluster.replicas == 3
    assert cluster.image == engine.image()
    assert cluster.storage == Storage(size="5Gi", storage_class=None, ephemeral=False,
                                      when_scaled="Retain", when_deleted="Retain")
    assert (cluster.tls_provider, cluster.tls, cluster.issuer_ref) == ("auto", True, None)
    assert cluster.options == {}
    assert (cluster.pdb_enabled, cluster.pdb_min_available) == (True, None)
    assert cluster.sidecar.image == DEFAULT_SIDECAR_IMAGE
    assert (cluster.sidecar.heartbeat_interval, cluster.sidecar.clean_interval,
            cluster.sidecar.clean_grace) == (10, 30, 300)
    assert cluster.pod.labels == {} and cluster.pod.affinity is None and cluster.pod.tolerations == ()


def test_missing_spec_namespace_and_generation() -> None:
    cluster = parse_body({"kind": contract.KIND_ETCD, "metadata": {"name": "x"}, "spec": None})
    assert (cluster.namespace, cluster.uid, cluster.generation, cluster.replicas) == ("default", "", 0, 3)


def test_every_field_is_read() -> None:
    obj = body(
        contract.KIND_XLINE,
        replicas=5,
        version="0.6.1",
        workloadKind="AdvancedStatefulSet",
        storage={"size": "10Gi", "storageClassName": "fast",
                 "retentionPolicy": {"whenScaled": "Delete", "whenDeleted": "Delete"}},
        tls={"provider": "cert-manager", "issuerRef": {"name": "ca", "kind": "ClusterIssuer"}},
        options={"quota": 1024, "jaeger-online": ""},
        podTemplate={
            "labels": {"team": "db"}, "annotations": {"a": "b"},
            "resources": {"requests": {"cpu": "1"}},
            "affinity": {"podAntiAffinity": {}}, "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "topologySpreadConstraints": [{"maxSkew": 1}],
            "priorityClassName": "high",
        },
        podDisruptionBudget={"enabled": False, "minAvailable": "60%"},
        sidecar={"image": "me/sidecar:1", "heartbeatIntervalSeconds": 5, "cleanIntervalSeconds": 7,
                 "cleanGracePeriodSeconds": 0, "resources": {"limits": {"memory": "1Gi"}}},
    )
    c = parse_body(obj)
    assert (c.engine, c.backend, c.replicas, c.image) == (XLINE, ADVANCED_STATEFULSET, 5, "ghcr.io/xline-kv/xline:v0.6.1")
    assert c.storage == Storage("10Gi", "fast", False, "Delete", "Delete")
    assert (c.tls_provider, c.issuer_ref) == ("cert-manager", {"name": "ca", "kind": "ClusterIssuer"})
    assert c.options == {"quota": "1024", "jaeger-online": ""}  # values as flag text
    assert c.pod.labels == {"team": "db"} and c.pod.annotations == {"a": "b"}
    assert c.pod.resources == {"requests": {"cpu": "1"}}
    assert c.pod.node_selector == {"disk": "ssd"} and c.pod.priority_class_name == "high"
    assert c.pod.tolerations == ({"key": "k", "operator": "Exists"},)
    assert c.pod.topology_spread_constraints == ({"maxSkew": 1},)
    assert (c.pdb_enabled, c.pdb_min_available) == (False, "60%")
    assert (c.sidecar.image, c.sidecar.heartbeat_interval, c.sidecar.clean_interval, c.sidecar.clean_grace) == (
        "me/sidecar:1", 5, 7, 0)
    assert c.sidecar.resources == {"limits": {"memory": "1Gi"}}


def test_an_explicit_image_wins_over_the_version() -> None:
    assert parse_body(body(version="3.4.23", image="mirror/etcd:x")).image == "mirror/etcd:x"
    assert parse_body(body(version="3.4.23")).image == "gcr.io/etcd-development/etcd:v3.4.23"


def test_the_sidecar_image_defaults_to_the_operators_own() -> None:
    assert parse(body(), default_workload_kind="StatefulSet", sidecar_image="op:7").sidecar.image == "op:7"


def test_tls_disabled() -> None:
    cluster = parse_body(body(tls={"provider": "disabled"}))
    assert (cluster.tls_provider, cluster.tls) == ("disabled", False)


def test_owner_reference() -> None:
    for kind in (contract.KIND_ETCD, contract.KIND_XLINE):
        assert parse_body(body(kind)).owner_reference == {
            "apiVersion": "raftset.dev/v1alpha1", "kind": kind, "name": "demo", "uid": "0b1c2d3e-uid",
            "controller": True, "blockOwnerDeletion": True,
        }


# --- workload kind precedence: spec > status > operator default --------------------------------

@pytest.mark.parametrize(("spec_kind", "status_kind", "default", "expected"), [
    (None, None, "StatefulSet", STATEFULSET),
    (None, None, "AdvancedStatefulSet", ADVANCED_STATEFULSET),
    (None, "StatefulSet", "AdvancedStatefulSet", STATEFULSET),        # rendered before the default changed
    (None, "AdvancedStatefulSet", "StatefulSet", ADVANCED_STATEFULSET),
    ("AdvancedStatefulSet", None, "StatefulSet", ADVANCED_STATEFULSET),
    ("StatefulSet", None, "AdvancedStatefulSet", STATEFULSET),
    ("AdvancedStatefulSet", "AdvancedStatefulSet", "StatefulSet", ADVANCED_STATEFULSET),
    ("StatefulSet", "StatefulSet", "AdvancedStatefulSet", STATEFULSET),
])
def test_workload_kind_precedence(spec_kind: str | None, status_kind: str | None, default: str,
                                  expected: object) -> None:
    fields = {"workloadKind": spec_kind} if spec_kind else {}
    status = {"workloadKind": status_kind} if status_kind else None
    assert parse_body(body(status=status, **fields), default).backend is expected


@pytest.mark.parametrize(("spec_kind", "status_kind"), [
    ("StatefulSet", "AdvancedStatefulSet"), ("AdvancedStatefulSet", "StatefulSet"),
])
def test_a_spec_kind_contradicting_the_running_workload_is_refused(spec_kind: str, status_kind: str) -> None:
    """Two workloads of one name and selector in two APIs would fight over the same pods."""
    with pytest.raises(InvalidSpec, match=r"spec\.workloadKind") as error:
        parse_body(body(workloadKind=spec_kind, status={"workloadKind": status_kind}))
    assert status_kind in str(error.value)


# --- bad specs ------------------------------------------------------------------------------------

BAD: list[tuple[str, str, dict[str, Any], str]] = [
    # (id, kind, spec fields, the text the message must contain)
    ("replicas zero", contract.KIND_ETCD, {"replicas": 0}, "spec.replicas"),
    ("replicas negative", contract.KIND_ETCD, {"replicas": -3}, "spec.replicas"),
    ("replicas string", contract.KIND_ETCD, {"replicas": "3"}, "spec.replicas"),
    ("replicas float", contract.KIND_XLINE, {"replicas": 3.0}, "spec.replicas"),
    ("replicas bool", contract.KIND_XLINE, {"replicas": True}, "spec.replicas"),
    ("replicas null", contract.KIND_XLINE, {"replicas": None}, "spec.replicas"),
    ("unknown workload kind", contract.KIND_ETCD, {"workloadKind": "Deployment"}, "spec.workloadKind"),
    ("workload kind case", contract.KIND_XLINE, {"workloadKind": "statefulset"}, "spec.workloadKind"),
    ("unknown TLS provider", contract.KIND_ETCD, {"tls": {"provider": "letsencrypt"}}, "spec.tls.provider"),
    ("empty TLS provider", contract.KIND_XLINE, {"tls": {"provider": ""}}, "spec.tls.provider"),
    ("ephemeral with storage class", contract.KIND_ETCD,
     {"storage": {"ephemeral": True, "storageClassName": "fast"}}, "spec.storage.ephemeral"),
    ("etcd data-dir", contract.KIND_ETCD, {"options": {"data-dir": "/x"}}, "data-dir"),
    ("etcd dashed name", contract.KIND_ETCD, {"options": {"--name": "x"}}, "--name"),
    ("etcd initial-cluster", contract.KIND_ETCD, {"options": {"initial-cluster": "a=b"}}, "initial-cluster"),
    ("etcd TLS", contract.KIND_ETCD, {"options": {"peer-cert-file": "/x"}}, "peer-cert-file"),
    ("etcd config-file", contract.KIND_ETCD, {"options": {"config-file": "/x"}}, "config-file"),
    ("etcd name=value", contract.KIND_ETCD, {"options": {"wal-dir=/x": ""}}, "wal-dir"),
    ("xline members", contract.KIND_XLINE, {"options": {"members": "a=http://x"}}, "members"),
    ("xline storage-engine", contract.KIND_XLINE, {"options": {"storage-engine": "memory"}}, "storage-engine"),
    ("xline data-dir", contract.KIND_XLINE, {"options": {"data-dir": "/x"}}, "data-dir"),
    ("xline TLS", contract.KIND_XLINE, {"options": {"client-key-path": "/x"}}, "client-key-path"),
    ("xline name=value", contract.KIND_XLINE, {"options": {"members=a=http://x": ""}}, "members"),
    ("heartbeat zero", contract.KIND_ETCD, {"sidecar": {"heartbeatIntervalSeconds": 0}},
     "spec.sidecar.heartbeatIntervalSeconds"),
    ("heartbeat text", contract.KIND_XLINE, {"sidecar": {"heartbeatIntervalSeconds": "ten"}},
     "spec.sidecar.heartbeatIntervalSeconds"),
    ("clean interval negative", contract.KIND_ETCD, {"sidecar": {"cleanIntervalSeconds": -1}},
     "spec.sidecar.cleanIntervalSeconds"),
    ("clean grace negative", contract.KIND_ETCD, {"sidecar": {"cleanGracePeriodSeconds": -1}},
     "spec.sidecar.cleanGracePeriodSeconds"),
    ("clean grace float", contract.KIND_XLINE, {"sidecar": {"cleanGracePeriodSeconds": 1.5}},
     "spec.sidecar.cleanGracePeriodSeconds"),
    ("quorum-loss policy unknown", contract.KIND_ETCD, {"recovery": {"quorumLoss": "Sometimes"}},
     "spec.recovery.quorumLoss"),
    ("quorum-loss grace negative", contract.KIND_XLINE, {"recovery": {"quorumLossGracePeriodSeconds": -1}},
     "spec.recovery.quorumLossGracePeriodSeconds"),
    ("quorum-loss grace over a day", contract.KIND_ETCD, {"recovery": {"quorumLossGracePeriodSeconds": 86401}},
     "spec.recovery.quorumLossGracePeriodSeconds"),
    ("defrag schedule of six fields", contract.KIND_ETCD, {"maintenance": {"defrag": {"schedule": "0 0 3 * * 0"}}},
     "spec.maintenance.defrag.schedule"),
    ("defrag schedule out of range", contract.KIND_XLINE, {"maintenance": {"defrag": {"schedule": "61 * * * *"}}},
     "spec.maintenance.defrag.schedule"),
    ("defrag threshold over 100", contract.KIND_ETCD, {"maintenance": {"defrag": {"thresholdPercent": 101}}},
     "spec.maintenance.defrag.thresholdPercent"),
    ("defrag threshold text", contract.KIND_XLINE, {"maintenance": {"defrag": {"thresholdPercent": "half"}}},
     "spec.maintenance.defrag.thresholdPercent"),
    ("hash check negative", contract.KIND_XLINE, {"maintenance": {"hashCheckIntervalSeconds": -1}},
     "spec.maintenance.hashCheckIntervalSeconds"),
    ("hash check text", contract.KIND_ETCD, {"maintenance": {"hashCheckIntervalSeconds": "5m"}},
     "spec.maintenance.hashCheckIntervalSeconds"),
    ("repair policy", contract.KIND_ETCD, {"repair": {"policy": "Sometimes"}}, "spec.repair.policy"),
    ("crash loop of one", contract.KIND_XLINE, {"repair": {"crashLoopRestarts": 1}}, "spec.repair.crashLoopRestarts"),
    ("crash loop text", contract.KIND_ETCD, {"repair": {"crashLoopRestarts": "many"}},
     "spec.repair.crashLoopRestarts"),
]


@pytest.mark.parametrize(("kind", "fields", "field"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_spec_names_the_field(kind: str, fields: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSpec) as error:
        parse_body(body(kind, **fields))
    assert field in str(error.value)


def test_refused_options_are_all_named_and_the_engine_said() -> None:
    with pytest.raises(InvalidSpec) as error:
        parse_body(body(options={"name": "x", "data-dir": "/y", "snapshot-count": "5"}))
    message = str(error.value)
    assert "data-dir, name" in message and "snapshot-count" not in message
    assert "these flags" in message and "etcd" in message


@pytest.mark.parametrize(("kind", "option"), [
    (contract.KIND_ETCD, "members"),           # Xline's flag: harmless for etcd
    (contract.KIND_XLINE, "initial-cluster"),  # etcd's flag: not owned for Xline
    (contract.KIND_ETCD, "snapshot-count"),
    (contract.KIND_XLINE, "log-file"),
])
def test_options_owned_only_by_the_other_engine_are_accepted(kind: str, option: str) -> None:
    assert option in parse_body(body(kind, options={option: "v"})).options


def test_unknown_kind() -> None:
    with pytest.raises(InvalidSpec, match="unknown kind 'Deployment'"):
        parse_body(body("Deployment"))


def test_unknown_default_workload_kind_is_named() -> None:
    with pytest.raises(InvalidSpec, match="spec.workloadKind 'CloneSet'"):
        parse_body(body(), "CloneSet")


def test_invalid_spec_is_a_value_error() -> None:
    """Handlers catch InvalidSpec; anything else from parse would be a crash loop."""
    assert issubclass(InvalidSpec, ValueError)
