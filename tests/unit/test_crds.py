"""The CRDs: generated files up to date, structural, and validating what they should.

The OpenAPI part is checked with jsonschema on the converted structural schema; the CEL
rules are evaluated with cel-python the way the apiserver binds them (`self` at the
rule's place in the object, `oldSelf` for transition rules on updates). The real
apiserver's verdict on the same rules is the e2e tier's job.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml
from celpy import celtypes

from raftset import backups, contract, engines, fields, workloads
from tools import crdgen

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "kustomize" / "samples"
ENGINES = list(engines.ENGINES.values())
_MISSING = object()


# --- schema -> jsonschema -----------------------------------------------------------------


def to_jsonschema(node: Mapping[str, Any], *, root: bool = True) -> dict[str, Any]:
    """A structural schema as plain JSON Schema: unknown fields refused, int-or-string spelled out."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("description", "default", "format"):
            continue
        if key == "properties":
            out[key] = {name: to_jsonschema(child, root=False) for name, child in value.items()}
            if root and "metadata" in value:  # the rest of ObjectMeta is the apiserver's
                out[key]["metadata"].pop("additionalProperties")
        elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
            out[key] = to_jsonschema(value, root=False)
        elif key == "anyOf":
            out[key] = [to_jsonschema(child, root=False) for child in value]
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in node:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@lru_cache
def validator(kind: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(to_jsonschema(crdgen.schema_of(engines.BY_KIND[kind])))


def schema_errors(obj: Mapping[str, Any]) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(obj["kind"]).iter_errors(obj)]


# --- CEL, bound the way the apiserver binds it --------------------------------------------

_CEL = celpy.Environment()


def _join(items: celtypes.ListType, sep: celtypes.StringType) -> celtypes.StringType:
    """Kubernetes' strings extension `list.join(sep)`, absent from cel-python."""
    return celtypes.StringType(str(sep).join(str(i) for i in items))


def _split(text: celtypes.StringType, sep: celtypes.StringType) -> celtypes.ListType:
    """Kubernetes' strings extension `string.split(sep)`, absent from cel-python."""
    return celtypes.ListType([celtypes.StringType(part) for part in str(text).split(str(sep))])


@lru_cache(maxsize=None)
def _program(expr: str) -> celpy.Runner:
    return _CEL.program(_CEL.compile(expr), functions={"join": _join, "split": _split})


def _evaluate(expr: str, **bindings: Any) -> Any:
    result = _program(expr).evaluate({k: celpy.json_to_cel(v) for k, v in bindings.items()})
    if isinstance(result, celpy.CELEvalError):
        raise AssertionError(f"CEL error in {expr!r}: {result}")
    return result


def cel_violations(schema: Mapping[str, Any], new: Any, old: Any = _MISSING, path: str = "") -> list[str]:
    """Messages of the rules `new` breaks; transition rules only where `old` has a value too."""
    found: list[str] = []
    for rule in schema.get("x-kubernetes-validations", []):
        transition = "oldSelf" in rule["rule"]
        if transition and old is _MISSING:
            continue
        bindings = {"self": new, **({"oldSelf": old} if transition else {})}
        if _evaluate(rule["rule"], **bindings) != celtypes.BoolType(True):
            message = rule["message"]
            if "messageExpression" in rule:
                message = str(_evaluate(rule["messageExpression"], **bindings))
            found.append(f"{path or '<root>'}: {message}")
    if isinstance(new, Mapping):
        for name, child in schema.get("properties", {}).items():
            if name in new:
                old_child = old.get(name, _MISSING) if isinstance(old, Mapping) else _MISSING
                found += cel_violations(child, new[name], old_child, f"{path}.{name}")
        if isinstance(schema.get("additionalProperties"), Mapping):
            for key, value in new.items():
                old_child = old.get(key, _MISSING) if isinstance(old, Mapping) else _MISSING
                found += cel_violations(schema["additionalProperties"], value, old_child, f"{path}[{key}]")
    if isinstance(new, list) and "items" in schema:
        for i, item in enumerate(new):
            found += cel_violations(schema["items"], item, _MISSING, f"{path}[{i}]")
    return found


def violations(obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[str]:
    """Everything the apiserver would refuse in `obj` (as an update of `old` when given)."""
    schema = crdgen.schema_of(engines.BY_KIND[obj["kind"]])
    return schema_errors(obj) + cel_violations(schema, obj, _MISSING if old is None else old)


# --- objects -----------------------------------------------------------------------------------


def samples() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(SAMPLES.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def cluster(kind: str = contract.KIND_ETCD, name: str = "demo", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": contract.API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}


def full_spec() -> dict[str, Any]:
    """A spec that sets every field the schema has."""
    resources = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": 2, "memory": "1Gi"}}
    return {
        "replicas": 5,
        "version": "3.5.17",
        "image": "registry.example/etcd:v3.5.17-custom",
        "workloadKind": "AdvancedStatefulSet",
        "storage": {"storageClassName": "fast-ssd", "size": "10Gi", "ephemeral": False,
                    "retentionPolicy": {"whenScaled": "Delete", "whenDeleted": "Retain"}},
        "tls": {"provider": "cert-manager",
                "issuerRef": {"name": "ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}},
        "options": {"heartbeat-interval": "100", "quiet": ""},
        "podTemplate": {
            "labels": {"team": "storage"},
            "annotations": {"prometheus.io/scrape": "true"},
            "resources": resources,
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname",
                 "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "demo"}}}]}},
            "nodeSelector": {"disktype": "ssd"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "etcd", "effect": "NoSchedule"}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                           "whenUnsatisfiable": "DoNotSchedule"}],
            "priorityClassName": "system-cluster-critical",
        },
        "podDisruptionBudget": {"enabled": True, "minAvailable": "60%"},
        "maintenance": {"defrag": {"schedule": "0 3 * * 0", "thresholdPercent": 30}, "hashCheckIntervalSeconds": 60},
        "sidecar": {"image": "ghcr.io/raftset/raftset:0.1.0", "heartbeatIntervalSeconds": 5,
                    "cleanIntervalSeconds": 15, "cleanGracePeriodSeconds": 0, "resources": resources},
        "recovery": {"quorumLoss": "Automatic", "quorumLossGracePeriodSeconds": 120, "nodeLoss": "Manual",
                     "nodeLossGracePeriodSeconds": 600},
        "backup": {"schedule": "0 */6 * * *", "retention": {"keep": 7, "maxAge": "3d",
                                                                             "abortIncompleteUploadsAfter": "12h"},
                   "s3": S3_FULL},
        "bootstrap": {"fromBackup": {"backup": "latest", "cluster": "old", "namespace": "shop",
                                     "pvc": PVC_FULL}},
        "repair": {"policy": "Automatic", "crashLoopRestarts": 3},
    }


S3_FULL = {"endpoint": "https://s3.example.com:9000", "bucket": "etcd-backups", "prefix": "prod",
           "region": "eu-west-1", "credentialsSecret": "s3-credentials",
           "caSecret": {"name": "s3-ca", "key": "ca.crt"}}
PVC_FULL = {"claimName": "etcd-backups", "prefix": "prod"}
# Each destination is s3 or pvc, never both (CEL): the fields full_spec() leaves out for that.
OTHER_DESTINATIONS = {"backup": {"pvc": PVC_FULL}, "bootstrap": {"fromBackup": {"s3": S3_FULL}}}


def full_status() -> dict[str, Any]:
    return {
        "observedGeneration": 4, "replicas": 3, "readyReplicas": 3, "selector": "app.kubernetes.io/instance=demo",
        "leader": "demo-2", "workloadKind": "AdvancedStatefulSet", "reservedOrdinals": [1],
        "members": [{"name": "demo-2", "id": "8e9e05c52164694d", "role": "leader", "healthy": True,
                     "lastHeartbeat": "2024-01-01T00:00:00Z"}],
        "conditions": [{"type": "Available", "status": "True", "reason": "QuorumReady", "message": "3/3 ready",
                        "lastTransitionTime": "2024-01-01T00:00:00Z", "observedGeneration": 4}],
        "kopf": {"progress": {"anything": {"retries": 1}}},
    }


def with_spec(obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    new = copy.deepcopy(obj)
    new["spec"].update(spec)
    return new


# --- generated files ------------------------------------------------------------------------------


def test_committed_files_are_the_generated_ones() -> None:
    stale = [str(p.relative_to(ROOT)) for p, text in crdgen.rendered_files().items()
             if not p.exists() or p.read_text() != text]
    assert not stale, f"run `python -m tools.crdgen`: {stale} are out of date"


def test_check_mode_reports_no_stale_file() -> None:
    assert crdgen.main(["--check"]) == 0


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_committed_crd_parses_back_to_the_generated_dict(engine: engines.Engine) -> None:
    assert yaml.safe_load((crdgen.CRD_DIR / crdgen.crd_filename(engine)).read_text()) == crdgen.crd(engine)


def test_reference_doc_lists_every_spec_and_status_field() -> None:
    doc = crdgen.REFERENCE_DOC.read_text()
    for path, _ in crdgen._walk(crdgen.schema_of(engines.ETCD)["properties"]["spec"], "spec"):
        assert f"| `{path}` |" in doc
    for path, _ in crdgen._walk(crdgen.schema_of(engines.ETCD)["properties"]["status"], "status"):
        assert f"| `{path}` |" in doc


# --- shape of the CRDs -----------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_names_scope_and_subresources(engine: engines.Engine) -> None:
    doc = crdgen.crd(engine)
    assert doc["metadata"]["name"] == f"{engine.plural}.{contract.GROUP}"
    spec = doc["spec"]
    assert spec["group"] == contract.GROUP and spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == engine.kind and spec["names"]["plural"] == engine.plural
    assert spec["names"]["shortNames"] == [engine.short_name]
    assert spec["names"]["categories"] == ["raftset"]
    (version,) = spec["versions"]
    assert version["name"] == contract.VERSION and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}, "scale": {
        "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector"}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {"Ready": ".status.readyReplicas", "Desired": ".spec.replicas", "Leader": ".status.leader",
                       "Workload": ".status.workloadKind", "Version": ".status.version",
                       "Age": ".metadata.creationTimestamp"}


def test_short_names_differ() -> None:
    assert [e.short_name for e in ENGINES] == ["etcdc", "xc"]


def test_kinds_differ_only_in_names_and_engine_words() -> None:
    etcd, xline = (crdgen.crd(e) for e in (engines.ETCD, engines.XLINE))
    etcd_spec, xline_spec = (d["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
                             for d in (etcd, xline))
    assert etcd_spec["properties"].keys() == xline_spec["properties"].keys()
    for name in etcd_spec["properties"]:
        if name not in ("options", "version"):
            assert etcd_spec["properties"][name] == xline_spec["properties"][name], name
    assert etcd_spec["properties"]["version"]["default"] == engines.ETCD.default_version
    assert xline_spec["properties"]["version"]["default"] == engines.XLINE.default_version


def _nodes(schema: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    yield from crdgen._walk(dict(schema), path)


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_every_field_has_a_description(engine: engines.Engine) -> None:
    missing = [p for p, node in _nodes(crdgen.schema_of(engine)) if p != "metadata" and not node.get("description")]
    assert not missing


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_schema_is_structural(engine: engines.Engine) -> None:
    root = crdgen.schema_of(engine)
    metadata = root["properties"]["metadata"]  # anything but name and generateName is forbidden there
    assert set(metadata) == {"type", "properties"} and set(metadata["properties"]) == {"name", "generateName"}
    for path, node in _nodes(root):
        if node.get("x-kubernetes-int-or-string"):
            # the apiserver recognises int-or-string only with exactly this anyOf
            assert "type" not in node and node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            continue
        assert node.get("type") in ("object", "array", "string", "integer", "boolean"), path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node["type"] == "array":
            assert "items" in node, path
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert node["type"] == "object" and "properties" not in node, path
        for rule in node.get("x-kubernetes-validations", []):
            assert rule["message"] and "\n" not in rule["message"], path


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_defaults_validate_against_their_own_field(engine: engines.Engine) -> None:
    for path, node in _nodes(crdgen.schema_of(engine)):
        if "default" in node:
            errors = list(jsonschema.Draft7Validator(to_jsonschema(node)).iter_errors(node["default"]))
            assert not errors, (path, errors)


def test_enums_follow_the_shared_names() -> None:
    spec = crdgen.schema_of(engines.ETCD)["properties"]["spec"]["properties"]
    status = crdgen.schema_of(engines.ETCD)["properties"]["status"]["properties"]
    assert spec["workloadKind"]["enum"] == list(workloads.BACKENDS) == ["StatefulSet", "AdvancedStatefulSet"]
    assert "default" not in spec["workloadKind"]  # the operator's configuration decides
    assert status["members"]["items"]["properties"]["role"]["enum"] == list(contract.ROLES)


def test_status_keeps_room_only_for_kopf() -> None:
    status = crdgen.schema_of(engines.ETCD)["properties"]["status"]
    assert not status.get("x-kubernetes-preserve-unknown-fields")
    assert status["properties"]["kopf"]["x-kubernetes-preserve-unknown-fields"] is True


# --- good objects ---------------------------------------------------------------------------------------


def test_there_is_a_sample_per_kind() -> None:
    assert sorted(d["kind"] for d in samples()) == sorted(e.kind for e in ENGINES)


@pytest.mark.parametrize("sample", samples(), ids=lambda d: d["kind"])
def test_sample_is_accepted(sample: dict[str, Any]) -> None:
    assert violations(sample) == []
    assert violations(sample, old=sample) == []


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_full_object_with_status_is_accepted(engine: engines.Engine) -> None:
    obj = cluster(engine.kind, **full_spec())
    obj["status"] = full_status()
    assert violations(obj) == []
    assert violations(obj, old=obj) == []


def test_full_spec_sets_every_field() -> None:
    schema = crdgen.schema_of(engines.ETCD)["properties"]["spec"]
    spec = full_spec()
    unset = [p for p, node in _nodes(schema, "spec") if "<key>" not in p and "[]" not in p
             and _lookup(spec, p.split(".")[1:]) is _MISSING
             and _lookup(OTHER_DESTINATIONS, p.split(".")[1:]) is _MISSING]
    assert not unset


def _lookup(obj: Any, parts: list[str]) -> Any:
    for part in parts:
        if not isinstance(obj, Mapping) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


@pytest.mark.parametrize("spec", [
    {},
    {"replicas": 1},
    {"replicas": 9},
    {"storage": {"size": 1073741824}},
    {"storage": {"size": "500M"}},
    {"storage": {"ephemeral": True}},
    {"tls": {"provider": "disabled"}},
    {"podDisruptionBudget": {"minAvailable": 2}},
    {"podDisruptionBudget": {"enabled": False}},
    {"version": "3.6.0-rc.1"},
    {"sidecar": {"cleanGracePeriodSeconds": 0}},
], ids=str)
def test_small_specs_are_accepted(spec: dict[str, Any]) -> None:
    assert violations(cluster(**spec)) == []


# --- bad objects -------------------------------------------------------------------------------------------

BAD_SPECS: list[tuple[str, dict[str, Any], str]] = [
    ("negative replicas", {"replicas": -1}, "replicas"),
    ("zero replicas", {"replicas": 0}, "replicas"),
    ("too many replicas", {"replicas": 10}, "replicas"),
    ("replicas as string", {"replicas": "3"}, "replicas"),
    ("fractional replicas", {"replicas": 2.5}, "replicas"),
    ("bad quantity", {"storage": {"size": "1GB"}}, "storage.size"),
    ("word as quantity", {"storage": {"size": "lots"}}, "storage.size"),
    ("negative quantity", {"storage": {"size": "-1Gi"}}, "storage.size"),
    ("bad resource quantity", {"podTemplate": {"resources": {"requests": {"cpu": "1 core"}}}},
     "podTemplate.resources.requests.cpu"),
    ("unknown workload kind", {"workloadKind": "Deployment"}, "workloadKind"),
    ("workload kind wrong case", {"workloadKind": "statefulset"}, "workloadKind"),
    ("unknown TLS provider", {"tls": {"provider": "letsencrypt"}}, "tls.provider"),
    ("unknown issuer kind", {"tls": {"provider": "cert-manager", "issuerRef": {"name": "x", "kind": "Vault"}}},
     "tls.issuerRef.kind"),
    ("issuer without name", {"tls": {"provider": "cert-manager", "issuerRef": {"kind": "Issuer"}}},
     "tls.issuerRef"),
    ("unknown field", {"replica": 3}, "spec"),
    ("unknown nested field", {"storage": {"class": "fast"}}, "spec.storage"),
    ("version with leading v", {"version": "v3.5.17"}, "version"),
    ("version not semver", {"version": "latest"}, "version"),
    ("empty image", {"image": ""}, "image"),
    ("option value not a string", {"options": {"snapshot-count": 10000}}, "options.snapshot-count"),
    ("too many options", {"options": {f"flag-{i}": "1" for i in range(65)}}, "options"),
    ("tolerations not a list", {"podTemplate": {"tolerations": {"key": "x"}}}, "podTemplate.tolerations"),
    ("label value not a string", {"podTemplate": {"labels": {"tier": 1}}}, "podTemplate.labels.tier"),
    ("ephemeral not a boolean", {"storage": {"ephemeral": "yes"}}, "storage.ephemeral"),
    ("unknown retention policy", {"storage": {"retentionPolicy": {"whenScaled": "Keep"}}},
     "storage.retentionPolicy.whenScaled"),
    ("heartbeat of zero", {"sidecar": {"heartbeatIntervalSeconds": 0}}, "sidecar.heartbeatIntervalSeconds"),
    ("threshold over 100", {"maintenance": {"defrag": {"thresholdPercent": 101}}},
     "maintenance.defrag.thresholdPercent"),
    ("negative grace period", {"sidecar": {"cleanGracePeriodSeconds": -1}}, "sidecar.cleanGracePeriodSeconds"),
    ("hash check over a day", {"maintenance": {"hashCheckIntervalSeconds": 86401}}, "maintenance.hashCheckIntervalSeconds"),
    ("minAvailable as word", {"podDisruptionBudget": {"minAvailable": "half"}}, "podDisruptionBudget.minAvailable"),
    ("negative minAvailable", {"podDisruptionBudget": {"minAvailable": -1}}, "podDisruptionBudget.minAvailable"),
    ("PDB switch as string", {"podDisruptionBudget": {"enabled": "true"}}, "podDisruptionBudget.enabled"),
    ("schedule not cron", {"backup": {"schedule": "every hour", "pvc": PVC_FULL}}, "backup.schedule"),
    ("schedule of six fields", {"backup": {"schedule": "0 0 * * * *", "pvc": PVC_FULL}}, "backup.schedule"),
    ("retention age in weeks", {"backup": {"retention": {"maxAge": "1w"}, "pvc": PVC_FULL}},
     "backup.retention.maxAge"),
    ("retention keep of zero", {"backup": {"retention": {"keep": 0}, "pvc": PVC_FULL}}, "backup.retention.keep"),
    ("s3 without credentials", {"backup": {"s3": {"endpoint": "https://s3", "bucket": "bkt"}}}, "backup.s3"),
    ("s3 endpoint without scheme", {"backup": {"s3": {**S3_FULL, "endpoint": "s3.example.com"}}},
     "backup.s3.endpoint"),
    ("restore of a non-snapshot key", {"bootstrap": {"fromBackup": {"backup": "x/latest.json", "pvc": PVC_FULL}}},
     "bootstrap.fromBackup.backup"),
]


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
@pytest.mark.parametrize(("case", "spec", "where"), BAD_SPECS, ids=[c[0] for c in BAD_SPECS])
def test_bad_spec_is_refused_by_the_schema(engine: engines.Engine, case: str, spec: dict[str, Any],
                                           where: str) -> None:
    errors = schema_errors(cluster(engine.kind, **spec))
    assert errors, case
    assert any(e.startswith(f"spec.{where}") or e.startswith(where) for e in errors), errors


def test_bad_table_is_large_enough() -> None:
    assert len(BAD_SPECS) >= 10


def test_spec_of_wrong_type_and_unknown_top_level_field_are_refused() -> None:
    assert schema_errors({**cluster(), "spec": "three"})
    assert schema_errors({**cluster(), "specs": {}})


def test_status_with_unknown_role_or_condition_status_is_refused() -> None:
    obj = cluster()
    obj["status"] = full_status()
    obj["status"]["members"][0]["role"] = "candidate"
    obj["status"]["conditions"][0]["status"] = "Maybe"
    assert len(schema_errors(obj)) == 2


# --- CEL: create -------------------------------------------------------------------------------------------------

CEL_BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("ephemeral with a class", {"kind": "EtcdCluster", "spec": {"storage": {"ephemeral": True,
                                                                            "storageClassName": "x"}}},
     ".spec.storage", "mutually exclusive"),
    ("issuer with auto TLS", {"kind": "EtcdCluster", "spec": {"tls": {"provider": "auto",
                                                                      "issuerRef": {"name": "ca"}}}},
     ".spec.tls", "only allowed with tls.provider cert-manager"),
    ("issuer with TLS disabled", {"kind": "XlineCluster", "spec": {"tls": {"provider": "disabled",
                                                                           "issuerRef": {"name": "ca"}}}},
     ".spec.tls", "only allowed with tls.provider cert-manager"),
    ("flag with dashes", {"kind": "EtcdCluster", "spec": {"options": {"--snapshot-count": "1"}}},
     ".spec.options", "without leading dashes"),
    ("two backup destinations", {"kind": "EtcdCluster", "spec": {"backup": {"s3": S3_FULL, "pvc": PVC_FULL}}},
     ".spec.backup", "exactly one destination"),
    ("no backup destination", {"kind": "EtcdCluster", "spec": {"backup": {"schedule": "@daily"}}},
     ".spec.backup", "exactly one destination"),
    ("restore from nowhere", {"kind": "EtcdCluster", "spec": {"bootstrap": {"fromBackup": {"backup": "latest"}}}},
     ".spec", "needs s3 or pvc, or spec.backup"),
    ("uploads aborted too young", {"kind": "EtcdCluster", "spec": {"backup": {
        "retention": {"abortIncompleteUploadsAfter": "59m"}, "pvc": PVC_FULL}}},
     ".spec.backup.retention.abortIncompleteUploadsAfter", "must be at least 1h"),
    ("name too long", {"kind": "EtcdCluster", "name": "a" * 53}, "<root>", "at most 52 characters"),
    ("name with capitals", {"kind": "XlineCluster", "name": "Demo"}, "<root>", "DNS label"),
    ("name starting with a digit", {"kind": "EtcdCluster", "name": "1demo"}, "<root>", "DNS label"),
    ("name with a dot", {"kind": "EtcdCluster", "name": "de.mo"}, "<root>", "DNS label"),
]


@pytest.mark.parametrize(("case", "parts", "where", "message"), CEL_BAD, ids=[c[0] for c in CEL_BAD])
def test_bad_object_is_refused_by_cel(case: str, parts: dict[str, Any], where: str, message: str) -> None:
    obj = cluster(parts["kind"], parts.get("name", "demo"), **parts.get("spec", {}))
    assert schema_errors(obj) == [], "the CEL rule, not the schema, must be what refuses it"
    found = cel_violations(crdgen.schema_of(engines.BY_KIND[obj["kind"]]), obj)
    assert len(found) == 1 and found[0].startswith(f"{where}:") and message in found[0], found


def test_longest_allowed_name_is_accepted() -> None:
    assert violations(cluster(name="a" * 52)) == []


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
@pytest.mark.parametrize("flag", sorted(engines.ETCD.owned_flags | engines.XLINE.owned_flags))
def test_owned_flags_are_refused_by_name(engine: engines.Engine, flag: str) -> None:
    obj = cluster(engine.kind, options={flag: "x", "log-level": "debug"})
    found = cel_violations(crdgen.schema_of(engine), obj)
    if flag in engine.owned_flags:
        assert found == [f".spec.options: {engine.name} flag '{flag}' is set by the operator "
                         "and cannot be given in options"]
    else:
        assert found == []
    assert bool(found) == bool(engine.refused_options({flag: "x"}))


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_every_refused_flag_gets_its_own_message(engine: engines.Engine) -> None:
    owned = sorted(engine.owned_flags)[:3]
    found = cel_violations(crdgen.schema_of(engine), cluster(engine.kind, options=dict.fromkeys(owned, "")))
    assert len(found) == 3 and all(f"'{flag}'" in message for flag, message in zip(owned, found, strict=True))


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_options_rules_cover_exactly_the_owned_flags(engine: engines.Engine) -> None:
    rules = crdgen.schema_of(engine)["properties"]["spec"]["properties"]["options"]["x-kubernetes-validations"]
    assert rules[1:] == [crdgen.owned_flag_rule(engine, flag) for flag in sorted(engine.owned_flags)]


def test_the_rest_of_object_meta_is_left_to_the_apiserver() -> None:
    obj = cluster()
    obj["metadata"] = {"generateName": "demo-", "name": "demo-x7k2p", "namespace": "db",
                       "labels": {"team": "storage"}, "annotations": {"note": "x"}, "finalizers": ["kopf"]}
    assert violations(obj) == []


# --- CEL: update (transition rules) -------------------------------------------------------------------

UPDATES: list[tuple[str, dict[str, Any], dict[str, Any], str | None]] = [
    ("workload kind unchanged", {"workloadKind": "StatefulSet"}, {"workloadKind": "StatefulSet"}, None),
    ("workload kind set later", {}, {"workloadKind": "AdvancedStatefulSet"}, None),
    ("workload kind changed", {"workloadKind": "StatefulSet"}, {"workloadKind": "AdvancedStatefulSet"},
     "spec.workloadKind is immutable"),
    ("workload kind unset", {"workloadKind": "AdvancedStatefulSet"}, {}, "spec.workloadKind is immutable"),
    # Issue 14: unset is the default class the claims already have; setting one later was
    # accepted and silently rewrote the template (this case passed before the fix).
    ("class set later", {"storage": {}}, {"storage": {"storageClassName": "fast"}},
     "spec.storage.storageClassName is immutable"),
    ("class set later without a storage block", {}, {"storage": {"storageClassName": "fast"}},
     "spec.storage.storageClassName is immutable"),
    ("class still unset", {"storage": {}}, {"storage": {"size": "2Gi"}}, None),
    ("class unchanged", {"storage": {"storageClassName": "fast"}},
     {"storage": {"storageClassName": "fast", "size": "5Gi"}}, None),
    ("class changed", {"storage": {"storageClassName": "fast"}}, {"storage": {"storageClassName": "slow"}},
     "spec.storage.storageClassName is immutable"),
    ("class removed", {"storage": {"storageClassName": "fast"}}, {"storage": {}},
     "spec.storage.storageClassName is immutable"),
    ("storage removed with class", {"storage": {"storageClassName": "fast"}}, {},
     "spec.storage.storageClassName is immutable"),
    ("became ephemeral", {"storage": {"ephemeral": False}}, {"storage": {"ephemeral": True}},
     "spec.storage.ephemeral is immutable"),
    ("stopped being ephemeral", {"storage": {"ephemeral": True}}, {"storage": {}},
     "spec.storage.ephemeral is immutable"),
    ("size grown", {"storage": {"size": "1Gi"}}, {"storage": {"size": "2Gi"}}, None),
    ("scaled", {"replicas": 3}, {"replicas": 5}, None),
    ("TLS provider changed", {"tls": {"provider": "auto"}}, {"tls": {"provider": "disabled"}}, "spec.tls.provider is immutable"),
    ("backup changed", {"backup": {"pvc": PVC_FULL}}, {"backup": {"s3": S3_FULL, "schedule": "@daily"}}, None),
    ("restore source unchanged", {"bootstrap": {"fromBackup": {"backup": "latest", "pvc": PVC_FULL}}},
     {"replicas": 5, "bootstrap": {"fromBackup": {"backup": "latest", "pvc": PVC_FULL}}}, None),
    ("restore source changed", {"bootstrap": {"fromBackup": {"backup": "latest", "pvc": PVC_FULL}}},
     {"bootstrap": {"fromBackup": {"backup": "latest", "s3": S3_FULL}}}, "spec.bootstrap is immutable"),
    ("restore source removed", {"bootstrap": {"fromBackup": {"backup": "latest", "pvc": PVC_FULL}}}, {},
     "spec.bootstrap is immutable"),
    ("restore source added later", {}, {"bootstrap": {"fromBackup": {"backup": "latest", "pvc": PVC_FULL}}},
     "spec.bootstrap is immutable"),
]


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
@pytest.mark.parametrize(("case", "before", "after", "message"), UPDATES, ids=[u[0] for u in UPDATES])
def test_transition_rules(engine: engines.Engine, case: str, before: dict[str, Any], after: dict[str, Any],
                          message: str | None) -> None:
    old, new = cluster(engine.kind, **before), cluster(engine.kind, **after)
    assert violations(old) == [] and schema_errors(new) == []
    assert cel_violations(crdgen.schema_of(engine), new) == [], "a create of the new object is fine"
    found = cel_violations(crdgen.schema_of(engine), new, old)
    if message is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0].startswith(".spec:") and message in found[0], found


def test_immutable_workload_kind_rule_is_the_documented_one() -> None:
    rules = [r["rule"] for r in crdgen.schema_of(engines.ETCD)["properties"]["spec"]["x-kubernetes-validations"]]
    assert ("!has(oldSelf.workloadKind) || (has(self.workloadKind) && self.workloadKind == oldSelf.workloadKind)"
            in rules)


@pytest.mark.parametrize(("running", "asked", "refused"), [
    (None, "AdvancedStatefulSet", False),
    ("StatefulSet", "StatefulSet", False),
    ("StatefulSet", "AdvancedStatefulSet", True),
    ("AdvancedStatefulSet", "StatefulSet", True),
    ("AdvancedStatefulSet", None, False),
])
def test_workload_kind_set_later_must_match_the_running_one(running: str | None, asked: str | None,
                                                            refused: bool) -> None:
    old = cluster()
    if running:
        old["status"] = {"workloadKind": running}
    new = copy.deepcopy(old)
    if asked:
        new["spec"]["workloadKind"] = asked
    found = violations(new, old=old)
    assert bool(found) == refused, found
    if refused:
        assert found == ["<root>: spec.workloadKind must be the workload kind the cluster already runs on "
                         "(status.workloadKind): create a new cluster to change it"]


@pytest.mark.parametrize("field", list(fields.SPEC_FIELDS.values()), ids=lambda f: f.path)
def test_the_crd_publishes_the_field_tables_default_and_bounds(field: fields.Field) -> None:
    for engine in engines.ENGINES.values():
        node = crdgen.schema_of(engine)["properties"]["spec"]
        for name in field.path.split("."):
            node = node["properties"][name]
        assert node["default"] == field.default
        assert (node.get("minimum"), node.get("maximum")) == (field.minimum, field.maximum)
        assert tuple(node.get("enum", ())) == field.enum


def test_the_parser_applies_the_field_tables_defaults_to_an_empty_spec() -> None:
    from raftset.operator.pure import spec

    for engine in engines.ENGINES.values():
        parsed = spec.parse({"kind": engine.kind, "metadata": {"name": "kv"}}, default_workload_kind="StatefulSet")
        seen = {
            "replicas": parsed.replicas, "storage.size": parsed.storage.size,
            "storage.ephemeral": parsed.storage.ephemeral,
            "storage.retentionPolicy.whenScaled": parsed.storage.when_scaled,
            "storage.retentionPolicy.whenDeleted": parsed.storage.when_deleted,
            "tls.provider": parsed.tls_provider, "podDisruptionBudget.enabled": parsed.pdb_enabled,
            "sidecar.heartbeatIntervalSeconds": parsed.sidecar.heartbeat_interval,
            "sidecar.cleanIntervalSeconds": parsed.sidecar.clean_interval,
            "sidecar.cleanGracePeriodSeconds": parsed.sidecar.clean_grace,
            "recovery.quorumLoss": parsed.recovery.quorum_loss,
            "recovery.quorumLossGracePeriodSeconds": parsed.recovery.grace_seconds,
            "recovery.nodeLoss": parsed.recovery.node_loss,
            "recovery.nodeLossGracePeriodSeconds": parsed.recovery.node_loss_grace_seconds,
            "repair.policy": parsed.repair.policy,
            "repair.crashLoopRestarts": parsed.repair.crash_loop_restarts,
        }
        assert seen == {path: fields.default(path) for path in seen}


@pytest.mark.parametrize(("old", "new", "accepted"), [
    ("3.5.35", "3.5.36", True), ("3.5.35", "3.6.16", True), ("3.6.16", "3.6.2", True),
    ("3.5.35", "3.7.3", False),  # a skipped minor
    ("3.7.3", "3.6.16", False),  # a downgrade
    ("3.6.0-rc.1", "3.6.0", True),
])
def test_the_crd_moves_the_version_one_minor_forward_at_a_time(old: str, new: str, accepted: bool) -> None:
    schema = crdgen.schema_of(engines.ETCD)["properties"]["spec"]["properties"]["version"]
    broken = cel_violations(schema, new, old)
    assert (not broken) is accepted, broken


def _ages() -> Iterator[str]:
    """Every spelling the age pattern lets through, from a grid with leading zeros and the edges."""
    days, hours = (None, "0", "00", "1", "10"), (None, "0", "00", "01", "1", "23", "100")
    minutes = (None, "0", "1", "59", "059", "60", "060", "61", "99", "100", "0100", "600")
    for d, h, m in itertools.product(days, hours, minutes):
        text = "".join(f"{n}{unit}" for n, unit in ((d, "d"), (h, "h"), (m, "m")) if n is not None)
        if text:
            yield text


def test_the_cel_floor_of_abort_incomplete_uploads_after_agrees_with_the_parser() -> None:
    """The apiserver refuses exactly what raftset.backups refuses: below 1h (or zero)."""
    schema = crdgen.schema_of(engines.ETCD)["properties"]["spec"]["properties"]["backup"]["properties"]
    node = schema["retention"]["properties"]["abortIncompleteUploadsAfter"]
    checked = 0
    for text in _ages():
        try:
            usable = backups.abort_uploads_after({"retention": {"abortIncompleteUploadsAfter": text}}) is not None
        except backups.ConfigError:
            usable = False
        assert (cel_violations(node, text) == []) is usable, text
        checked += 1
    assert checked > 400
