"""A cluster custom resource read into plain, defaulted, checked data.

The CRD schema and its CEL rules reject most bad input at the apiserver; what they
cannot see (the operator's default workload kind, OpenKruise being installed, options
that slipped past an older CRD) is collected here as `problems`, which the handlers turn
into a Degraded condition and an Event instead of an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raftset import backups, contract, engines, fields, workloads
from raftset.operator.pure import versions
from raftset.operator.pure import space
from raftset.fields import SPEC_FIELDS


class InvalidSpec(ValueError):
    """The spec cannot be rendered; the message says what to fix, `reason` names it in Degraded."""

    def __init__(self, message: str, reason: str = "InvalidSpec") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Storage:
    size: str = fields.default("storage.size")
    storage_class: str | None = None
    ephemeral: bool = False
    when_scaled: str = "Retain"
    when_deleted: str = "Retain"


@dataclass(frozen=True)
class SidecarSettings:
    image: str
    heartbeat_interval: int = 10
    clean_interval: int = 30
    clean_grace: int = 300
    resources: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RecoverySettings:
    """spec.recovery: what the operator may do on its own after a quorum loss, and after a node
    lost with a member's data (raftset.nodeloss)."""

    quorum_loss: str = fields.default("recovery.quorumLoss")  # Manual | Automatic
    grace_seconds: int = fields.default("recovery.quorumLossGracePeriodSeconds")
    node_loss: str = fields.default("recovery.nodeLoss")  # Automatic | Manual
    node_loss_grace_seconds: int = fields.default("recovery.nodeLossGracePeriodSeconds")


@dataclass(frozen=True)
class Maintenance:
    """spec.maintenance: when the leader's sidecar defragments besides a NOSPACE alarm, and how often
    it compares every voter's data (the hash check)."""

    defrag_schedule: str = fields.default("maintenance.defrag.schedule")
    defrag_threshold_percent: int = fields.default("maintenance.defrag.thresholdPercent")
    hash_check_interval: int = fields.default("maintenance.hashCheckIntervalSeconds")


@dataclass(frozen=True)
class Repair:
    policy: str = fields.default("repair.policy")  # fields.REPAIR_POLICIES
    crash_loop_restarts: int = fields.default("repair.crashLoopRestarts")


@dataclass(frozen=True)
class PodOverrides:
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, Any] = field(default_factory=dict)  # empty: the operator's default requests
    affinity: Mapping[str, Any] | None = None  # None: the operator's default; {} : none at all
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    topology_spread_constraints: tuple[Mapping[str, Any], ...] | None = None  # None: default; (): none
    priority_class_name: str | None = None


@dataclass(frozen=True)
class Cluster:
    """Everything the renderers and the planner need to know about one cluster."""

    name: str
    namespace: str
    uid: str
    engine: engines.Engine
    backend: workloads.Backend
    replicas: int
    version: str
    image: str
    storage: Storage
    tls_provider: str
    issuer_ref: Mapping[str, str] | None
    options: Mapping[str, str]
    pod: PodOverrides
    pdb_enabled: bool
    pdb_min_available: int | str | None
    sidecar: SidecarSettings
    maintenance: Maintenance = field(default_factory=Maintenance)
    repair: Repair = field(default_factory=Repair)
    generation: int = 0
    recovery: RecoverySettings = field(default_factory=RecoverySettings)
    # spec.backup and spec.bootstrap.fromBackup as written; the sidecar reads them from the
    # cluster object, the operator only mounts their Secrets and volumes (docs/backups.md).
    backup: Mapping[str, Any] | None = None
    from_backup: Mapping[str, Any] | None = None

    @property
    def tls(self) -> bool:
        return self.tls_provider != "disabled"

    @property
    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": contract.API_VERSION,
            "kind": self.engine.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


DEFAULT_SIDECAR_IMAGE = "ghcr.io/raftset/raftset:0.1.0"


def _bounded(section: Mapping[str, Any], key: str, path: str) -> int:
    """An integer field with the bounds fields.SPEC_FIELDS declares; out of bounds is InvalidSpec."""
    spec_field = SPEC_FIELDS[path]
    value = section.get(key, spec_field.default)
    low, high = spec_field.minimum, spec_field.maximum
    if not isinstance(value, int) or isinstance(value, bool) or (low is not None and value < low) \
            or (high is not None and value > high):
        raise InvalidSpec(f"spec.{path} must be an integer in [{low}, {high}], got {value!r}")
    return value


def _choice(section: Mapping[str, Any], key: str, path: str) -> str:
    """A field with the values fields.SPEC_FIELDS declares; anything else is InvalidSpec."""
    spec_field = SPEC_FIELDS[path]
    value = section.get(key, spec_field.default)
    if value not in spec_field.enum:
        raise InvalidSpec(f"spec.{path} must be one of {', '.join(spec_field.enum)}, got {value!r}")
    return str(value)


def _seconds(section: Mapping[str, Any], key: str, default: int, *, minimum: int) -> int:
    """An interval from spec.sidecar; a bad one is InvalidSpec, not a crash of the handler."""
    value = section.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidSpec(f"spec.sidecar.{key} must be an integer >= {minimum}, got {value!r}")
    return value


def _maintenance(section: Mapping[str, Any]) -> Maintenance:
    defrag = section.get("defrag") or {}
    schedule = str(defrag.get("schedule") or "").strip()
    problem = backups.schedule_error(schedule) if schedule else None
    if problem:
        raise InvalidSpec(f"spec.maintenance.defrag.{problem}")
    return Maintenance(defrag_schedule=schedule,
                       defrag_threshold_percent=_bounded(defrag, "thresholdPercent", "maintenance.defrag.thresholdPercent"),
                       hash_check_interval=_bounded(section, "hashCheckIntervalSeconds",
                                                    "maintenance.hashCheckIntervalSeconds"))


def parse(body: Mapping[str, Any], *, default_workload_kind: str,
          sidecar_image: str = DEFAULT_SIDECAR_IMAGE) -> Cluster:
    """Read a cluster object; raise InvalidSpec with a message a user can act on."""
    kind = body.get("kind", "")
    engine = engines.BY_KIND.get(kind)
    if engine is None:
        raise InvalidSpec(f"unknown kind {kind!r}")
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}

    # Once rendered, the workload kind recorded in status wins over a changed default; a
    # spec naming another kind (the CRD lets an unset field be set once) would render a
    # second workload of the same name and selector in the other API.
    rendered_kind = status.get("workloadKind")
    if spec.get("workloadKind") and rendered_kind and spec["workloadKind"] != rendered_kind:
        raise InvalidSpec(
            f"spec.workloadKind {spec['workloadKind']!r} differs from the {rendered_kind!r} "
            f"already running; it cannot change: create a new cluster")
    workload_kind = spec.get("workloadKind") or rendered_kind or default_workload_kind
    backend = workloads.BACKENDS.get(workload_kind)
    if backend is None:
        raise InvalidSpec(
            f"spec.workloadKind {workload_kind!r} is not one of {sorted(workloads.BACKENDS)}")

    replicas = spec.get("replicas", 3)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        raise InvalidSpec(f"spec.replicas must be a positive integer, got {replicas!r}")

    version = str(spec.get("version") or engine.default_version)
    if not spec.get("image"):  # an image override names no version the operator can compare
        refused = versions.refusal(status.get("version"), version, engine.upgrade_floors)
        if refused:
            raise InvalidSpec(refused, reason="VersionChangeRefused")

    options = {str(k): str(v) for k, v in (spec.get("options") or {}).items()}
    refused = engine.refused_options(options)
    if refused:
        raise InvalidSpec(
            f"spec.options may not set {', '.join(refused)}: the operator owns "
            f"{'this flag' if len(refused) == 1 else 'these flags'} for {engine.name}")

    raw_storage = spec.get("storage") or {}
    retention = raw_storage.get("retentionPolicy") or {}
    storage = Storage(
        size=str(raw_storage.get("size", fields.default("storage.size"))),
        storage_class=raw_storage.get("storageClassName"),
        ephemeral=bool(raw_storage.get("ephemeral", False)),
        when_scaled=retention.get("whenScaled", "Retain"),
        when_deleted=retention.get("whenDeleted", "Retain"),
    )
    if storage.ephemeral and storage.storage_class:
        raise InvalidSpec("spec.storage.ephemeral and spec.storage.storageClassName exclude each other")
    too_small = space.refusal(engine, storage.size, options, ephemeral=storage.ephemeral)
    if too_small:
        raise InvalidSpec(too_small, reason="StorageTooSmall")
    maintenance = _maintenance(spec.get("maintenance") or {})

    tls = spec.get("tls") or {}
    provider = tls.get("provider", "auto")
    if provider not in ("auto", "cert-manager", "disabled"):
        raise InvalidSpec(f"spec.tls.provider {provider!r} is not one of auto, cert-manager, disabled")

    raw_pod = spec.get("podTemplate") or {}
    pod = PodOverrides(
        labels=dict(raw_pod.get("labels") or {}),
        annotations=dict(raw_pod.get("annotations") or {}),
        resources=dict(raw_pod.get("resources") or {}),
        affinity=raw_pod.get("affinity"),
        node_selector=dict(raw_pod.get("nodeSelector") or {}),
        tolerations=tuple(raw_pod.get("tolerations") or ()),
        topology_spread_constraints=(None if raw_pod.get("topologySpreadConstraints") is None
                                     else tuple(raw_pod["topologySpreadConstraints"])),
        priority_class_name=raw_pod.get("priorityClassName"),
    )

    raw_pdb = spec.get("podDisruptionBudget") or {}
    raw_sidecar = spec.get("sidecar") or {}
    sidecar = SidecarSettings(
        image=raw_sidecar.get("image") or sidecar_image,
        heartbeat_interval=_seconds(raw_sidecar, "heartbeatIntervalSeconds", 10, minimum=1),
        clean_interval=_seconds(raw_sidecar, "cleanIntervalSeconds", 30, minimum=1),
        clean_grace=_seconds(raw_sidecar, "cleanGracePeriodSeconds", 300, minimum=0),
        resources=dict(raw_sidecar.get("resources") or {}),
    )

    raw_recovery = spec.get("recovery") or {}
    recovery = RecoverySettings(
        quorum_loss=_choice(raw_recovery, "quorumLoss", "recovery.quorumLoss"),
        grace_seconds=_bounded(raw_recovery, "quorumLossGracePeriodSeconds", "recovery.quorumLossGracePeriodSeconds"),
        node_loss=_choice(raw_recovery, "nodeLoss", "recovery.nodeLoss"),
        node_loss_grace_seconds=_bounded(raw_recovery, "nodeLossGracePeriodSeconds", "recovery.nodeLossGracePeriodSeconds"))
    from_backup = (spec.get("bootstrap") or {}).get("fromBackup")
    raw_repair = spec.get("repair") or {}
    repair = Repair(policy=_choice(raw_repair, "policy", "repair.policy"),
                    crash_loop_restarts=_bounded(raw_repair, "crashLoopRestarts", "repair.crashLoopRestarts"))

    return Cluster(
        name=meta["name"],
        namespace=meta.get("namespace", "default"),
        uid=meta.get("uid", ""),
        engine=engine,
        backend=backend,
        replicas=replicas,
        version=version,
        image=engine.image(version, spec.get("image")),
        storage=storage,
        tls_provider=provider,
        issuer_ref=tls.get("issuerRef"),
        options=options,
        pod=pod,
        pdb_enabled=bool(raw_pdb.get("enabled", True)),
        pdb_min_available=raw_pdb.get("minAvailable"),
        sidecar=sidecar,
        maintenance=maintenance,
        repair=repair,
        generation=int(meta.get("generation", 0)),
        recovery=recovery,
        backup=spec.get("backup") or None,
        from_backup=from_backup or None,
    )
