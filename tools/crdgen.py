"""The CustomResourceDefinitions of both kinds, built from one source.

EtcdCluster and XlineCluster share every field; they differ only in names and in the
engine flags `spec.options` may not set, which come from `raftset.engines`. Building
both CRDs (and the field reference in docs/) from this module keeps them from drifting.

`python -m tools.crdgen` rewrites the committed files; a unit test fails when they
differ from what this module builds.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from raftset import contract, engines, fields, workloads
from raftset.fields import SPEC_FIELDS
from tools import chartgen

Schema = dict[str, Any]

# StatefulSet pod names get a "-<ordinal>" and the controller-revision-hash label a
# "-<10 chars>" suffix; both must stay within 63 characters.
MAX_NAME_LENGTH = 52
DNS_LABEL = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
# resource.Quantity, as apimachinery's OpenAPI publishes it, without a sign.
QUANTITY = (
    r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
VERSION = r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$"
OPTION_NAME_MAX = 64
MAX_OPTIONS = 64

REPO_ROOT = Path(__file__).resolve().parent.parent
CRD_DIR = REPO_ROOT / "crds"
REFERENCE_DOC = REPO_ROOT / "docs" / "crd-reference.md"


# --- schema building blocks -------------------------------------------------------


def _obj(description: str, properties: Mapping[str, Schema], *, required: Iterable[str] = (),
         rules: Iterable[Schema] = (), **extra: Any) -> Schema:
    schema: Schema = {"type": "object", "description": description, "properties": dict(properties)}
    if required:
        schema["required"] = list(required)
    if rules:
        schema["x-kubernetes-validations"] = list(rules)
    schema.update(extra)
    return schema


def _str(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


def _int(description: str, **extra: Any) -> Schema:
    return {"type": "integer", "description": description, **extra}


def _bool(description: str, **extra: Any) -> Schema:
    return {"type": "boolean", "description": description, **extra}


def _enum(description: str, values: Iterable[str], **extra: Any) -> Schema:
    return {"type": "string", "description": description, "enum": list(values), **extra}


def _string_map(description: str, value: str, **extra: Any) -> Schema:
    return {"type": "object", "description": description,
            "additionalProperties": {"type": "string", "description": value}, **extra}


def _quantity(description: str, **extra: Any) -> Schema:
    return {"description": description, "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY, "x-kubernetes-int-or-string": True, **extra}


def _opaque(description: str) -> Schema:
    """An object passed to the pod spec as is; the apiserver validates it there."""
    return {"type": "object", "description": description,
            "x-kubernetes-preserve-unknown-fields": True}


def _opaque_list(description: str, item: str) -> Schema:
    return {"type": "array", "description": description, "items": _opaque(item)}


def _rule(rule: str, message: str, **extra: Any) -> Schema:
    return {"rule": rule, "message": message, **extra}


def _immutable_once_set(path: str, field: str) -> Schema:
    """A transition rule: `path.field` may go from unset to set, never change or unset."""
    old, new = f"oldSelf{path}", f"self{path}"
    parents_old = [f"has(oldSelf{path})"] if path else []
    parents_new = [f"has(self{path})"] if path else []
    was_unset = " || ".join([f"!{p}" for p in parents_old] + [f"!has({old}.{field})"])
    kept = " && ".join(parents_new + [f"has({new}.{field})", f"{new}.{field} == {old}.{field}"])
    return _rule(f"{was_unset} || ({kept})",
                 f"spec{path}.{field} is immutable once set: create a new cluster to change it")


def _immutable(path: str, field: str, why: str) -> Schema:
    """A transition rule: `path.field` keeps what it had at creation, unset included."""
    def present(root: str) -> str:
        return " && ".join(([f"has({root}{path})"] if path else []) + [f"has({root}{path}.{field})"])
    return _rule(f"({present('oldSelf')}) == ({present('self')}) && "
                 f"(!({present('self')}) || self{path}.{field} == oldSelf{path}.{field})",
                 f"spec{path}.{field} is immutable: it cannot be set, changed or removed after the cluster "
                 f"is created ({why}); create a new cluster to change it")


def _resources(description: str) -> Schema:
    return _obj(description, {
        "requests": {"type": "object", "description": "Minimum compute resources, as in a container's resources.requests.",
                     "additionalProperties": _quantity("A quantity of one resource (e.g. 100m, 256Mi).")},
        "limits": {"type": "object", "description": "Maximum compute resources, as in a container's resources.limits.",
                   "additionalProperties": _quantity("A quantity of one resource (e.g. 500m, 1Gi).")},
    })


# --- spec -----------------------------------------------------------------------------


def owned_flag_rule(engine: engines.Engine, flag: str) -> Schema:
    """One rule per owned flag: a map lookup is cheap for the apiserver's cost budget,
    and the message names exactly the flag that was refused."""
    return _rule(f"!('{flag}' in self)",
                 f"{engine.name} flag '{flag}' is set by the operator and cannot be given in options")


def _options(engine: engines.Engine) -> Schema:
    owned = sorted(engine.owned_flags)
    return {
        "type": "object",
        "description": (
            f"Extra {engine.name} flags, by name without leading dashes (e.g. "
            f"'{'snapshot-count' if engine is engines.ETCD else 'heartbeat-interval'}'), "
            "to their values. An empty value passes the flag alone. Flags the operator sets "
            f"itself are refused: {', '.join(owned)}."
        ),
        "maxProperties": MAX_OPTIONS,
        "additionalProperties": _str("The flag's value, as it would follow the flag on the command line.",
                                     maxLength=4096),
        "x-kubernetes-validations": [
            _rule("self.all(k, !k.startsWith('-'))", "option names are flag names without leading dashes"),
            *(owned_flag_rule(engine, flag) for flag in owned),
        ],
    }


def _storage() -> Schema:
    return _obj(
        "Where each member keeps its data: a PersistentVolumeClaim per pod, or an emptyDir when ephemeral.",
        {
            "storageClassName": _str(
                "StorageClass of the members' PersistentVolumeClaims; the cluster's default class when unset. "
                "Immutable: it cannot be set, changed or removed after the cluster is created.", maxLength=253),
            "size": _quantity(
                "Requested size of each member's volume. Growing it expands the PersistentVolumeClaims "
                "when the StorageClass allows volume expansion.", **SPEC_FIELDS["storage.size"].bounds()),
            "ephemeral": _bool(
                "Keep data in an emptyDir instead of a PersistentVolumeClaim: data is lost with the pod. "
                "For test clusters only. Immutable.", **SPEC_FIELDS["storage.ephemeral"].bounds()),
            "retentionPolicy": _obj(
                "What happens to the PersistentVolumeClaims of members that go away.",
                {
                    "whenScaled": _enum("Retain or Delete the claims of members removed by a scale-in.",
                                        list(fields.RETENTION),
                                        **SPEC_FIELDS["storage.retentionPolicy.whenScaled"].bounds()),
                    "whenDeleted": _enum("Retain or Delete the claims when the cluster is deleted.",
                                         list(fields.RETENTION),
                                         **SPEC_FIELDS["storage.retentionPolicy.whenDeleted"].bounds()),
                },
                default={},
            ),
        },
        rules=[
            _rule("!(has(self.ephemeral) && self.ephemeral && has(self.storageClassName))",
                  "storage.ephemeral and storage.storageClassName are mutually exclusive"),
        ],
        default={},
    )


def _tls() -> Schema:
    return _obj(
        "Transport security of peer and client traffic.",
        {
            "provider": _enum(
                "auto: the operator creates a CA and the certificates and renews them; "
                "cert-manager: cert-manager issues them (from issuerRef, or a self-signed CA issuer the operator "
                "creates); disabled: plain HTTP (the cluster reports a warning condition).",
                list(fields.TLS_PROVIDERS), **SPEC_FIELDS["tls.provider"].bounds()),
            "issuerRef": _obj(
                "The cert-manager issuer that signs the certificates. Only with provider cert-manager.",
                {
                    "name": _str("Name of the Issuer or ClusterIssuer.", minLength=1, maxLength=253),
                    "kind": _enum("Issuer (in the cluster's namespace) or ClusterIssuer.",
                                  list(fields.ISSUER_KINDS), **SPEC_FIELDS["tls.issuerRef.kind"].bounds()),
                    "group": _str("API group of the issuer.", maxLength=253,
                                   **SPEC_FIELDS["tls.issuerRef.group"].bounds()),
                },
                required=["name"],
            ),
        },
        rules=[
            _rule("!has(self.issuerRef) || (has(self.provider) && self.provider == 'cert-manager')",
                  "tls.issuerRef is only allowed with tls.provider cert-manager"),
        ],
        default={},
    )


def _destination(what: str) -> dict[str, Schema]:
    """Where backups are: an S3-compatible bucket or a PersistentVolumeClaim (exactly one)."""
    secret_ref = _obj("A Secret in the cluster's namespace.", {
        "name": _str("Name of the Secret.", minLength=1, maxLength=253),
        "key": _str("Key of the PEM CA bundle in the Secret.", maxLength=253,
                    **SPEC_FIELDS["backup.s3.caSecret.key"].bounds()),
    }, required=["name"])
    return {
        "s3": _obj(
            f"An S3-compatible bucket {what}.",
            {
                "endpoint": _str("URL of the S3 endpoint, e.g. https://s3.example.com:9000.",
                                 pattern="^https?://[^/]+/?$", maxLength=512),
                "bucket": _str("The bucket; it must exist.", minLength=3, maxLength=63),
                "prefix": _str("Key prefix; objects go under <prefix>/<namespace>/<cluster>/.", maxLength=512),
                "region": _str("The bucket's region.", maxLength=64, **SPEC_FIELDS["backup.s3.region"].bounds()),
                "credentialsSecret": _str(
                    "Secret with the keys accessKeyID and secretAccessKey, mounted into the members' pods.",
                    minLength=1, maxLength=253),
                "caSecret": secret_ref,
            },
            required=["endpoint", "bucket", "credentialsSecret"],
        ),
        "pvc": _obj(
            f"A PersistentVolumeClaim {what}, mounted into every member's pod (ReadWriteMany, or one node).",
            {
                "claimName": _str("Name of the claim in the cluster's namespace.", minLength=1, maxLength=253),
                "prefix": _str("Directory prefix inside the volume.", maxLength=512),
            },
            required=["claimName"],
        ),
    }


_ONE_DESTINATION = _rule("has(self.s3) != has(self.pvc)", "set exactly one destination: s3 or pvc")


def _backup() -> Schema:
    return _obj(
        "Scheduled and on-demand backups (Maintenance.Snapshot, sha256-verified) taken by the leader's sidecar. "
        "`kubectl annotate <kind> <name> raftset.dev/backup-now=true` takes one at once. Setting it on a "
        "running cluster, or naming another Secret or claim, rolls the members once (the leader last) to mount "
        "it; a backup asked for meanwhile waits for that roll.",
        {
            "schedule": _str("Cron schedule in UTC, five fields (e.g. `0 */6 * * *`) or @hourly/@daily/...; "
                             "unset: on-demand backups only.", pattern=fields.CRON_PATTERN, maxLength=128),
            "retention": _obj(
                "Which published backups to keep; the newest is always kept.",
                {
                    "keep": _int("Keep at most this many backups.", minimum=1, maximum=10000),
                    "maxAge": _str("Remove backups older than this, e.g. 7d, 12h, 1d12h.",
                                   pattern=fields.AGE_PATTERN, minLength=2, maxLength=32),
                    "abortIncompleteUploadsAfter": _str(
                        "Abort incomplete multipart uploads (and partial files on a volume) of this cluster "
                        "older than this, e.g. 24h, 2d: what a backup killed mid-upload leaves, which the store "
                        "would otherwise keep (and bill) forever. Swept by the leader's sidecar after each "
                        "backup; an upload a backup is writing is never aborted. At least 1h.",
                        pattern=fields.AGE_PATTERN, minLength=2, maxLength=32,
                        **SPEC_FIELDS["backup.retention.abortIncompleteUploadsAfter"].bounds(),
                        **{"x-kubernetes-validations": [_rule(
                            f"self.matches('{fields.AT_LEAST_AN_HOUR}')",
                            "abortIncompleteUploadsAfter must be at least 1h: a younger incomplete upload "
                            "may still be a running backup's")]}),
                },
            ),
            **_destination("that receives the backups"),
        },
        rules=[_ONE_DESTINATION],
    )


def _bootstrap() -> Schema:
    from_backup = _obj(
        "Seed the new cluster from a backup (sha256 checked first). etcd: the first member "
        "restores it under its own name, the others join as learners. Xline: every initial member "
        "restores the same snapshot and they bootstrap together. A missing or corrupt backup leaves "
        "the cluster Degraded with nothing started.",
        {
            "backup": _str("`latest`, or the object key of a snapshot (ending in .db).",
                           minLength=1, maxLength=1024, pattern="^(latest|.*[.]db)$"),
            "cluster": _str("The cluster whose backups these are; this cluster's name when unset.", maxLength=253),
            "namespace": _str("That cluster's namespace; this cluster's when unset.", maxLength=63),
            **_destination("to restore from; spec.backup's destination when unset"),
        },
        required=["backup"],
        rules=[_rule("!(has(self.s3) && has(self.pvc))", "set at most one source: s3 or pvc")],
    )
    return _obj(
        "How a new cluster starts. Immutable: it only matters on the cluster's first start.",
        {"fromBackup": from_backup},
    )


def _pod_template() -> Schema:
    return _obj(
        "Additions to the members' pods.",
        {
            "labels": _string_map("Labels added to every pod (the operator's own labels win).", "A label value."),
            "annotations": _string_map("Annotations added to every pod.", "An annotation value."),
            "resources": _resources("Compute resources of the store container. When unset the store "
                                    "requests 250m CPU and 512Mi memory, with no limits."),
            "affinity": _opaque("The pods' affinity, as in a pod spec. When unset the operator prefers "
                                "members on different nodes (preferred pod anti-affinity on "
                                "kubernetes.io/hostname); {} sets none."),
            "nodeSelector": _string_map("The pods' nodeSelector, as in a pod spec.", "A required node label value."),
            "tolerations": _opaque_list("The pods' tolerations, as in a pod spec.", "One toleration."),
            "topologySpreadConstraints": _opaque_list(
                "The pods' topologySpreadConstraints, as in a pod spec. When unset the operator spreads "
                "members over zones where it can (maxSkew 1 on topology.kubernetes.io/zone, "
                "ScheduleAnyway); [] sets none.", "One topology spread constraint."),
            "priorityClassName": _str("The pods' PriorityClass.", maxLength=253),
        },
    )


def _spec(engine: engines.Engine) -> Schema:
    return _obj(
        f"The desired state of the {engine.name} cluster.",
        {
            "replicas": _int("Number of members. Use an odd number: 3 tolerates one failure, 5 two.",
                             format="int32", **SPEC_FIELDS["replicas"].bounds()),
            "version": _str(
                f"{engine.name} version without a leading v (e.g. {engine.default_version}); the image is "
                f"{engine.image_repository}:v<version>. Defaulted when the cluster is created, so that a "
                "later operator release does not upgrade it. A change rolls the members one at a time, "
                "the leader last; it may move one minor release forward at a time, never back.",
                default=engine.default_version, pattern=VERSION, maxLength=64,
                **{"x-kubernetes-validations": [_rule(
                    "int(self.split('.')[0]) == int(oldSelf.split('.')[0]) "
                    "&& int(self.split('.')[1]) >= int(oldSelf.split('.')[1]) "
                    "&& int(self.split('.')[1]) <= int(oldSelf.split('.')[1]) + 1",
                    "spec.version may move one minor release forward at a time (e.g. 3.5 -> 3.6): "
                    "skipping a minor or moving back to an older minor is refused")]}),
            "image": _str("Full image reference of the store; overrides version.", minLength=1, maxLength=512),
            "workloadKind": _enum(
                "Workload that runs the pods: the builtin StatefulSet, or OpenKruise's Advanced StatefulSet, "
                "which lets a scale-in remove followers and keep the leader. When unset the operator's "
                "configured default applies. Immutable once set.",
                list(workloads.BACKENDS)),
            "storage": _storage(),
            "tls": _tls(),
            "backup": _backup(),
            "bootstrap": _bootstrap(),
            "options": _options(engine),
            "podTemplate": _pod_template(),
            "podDisruptionBudget": _obj(
                "The PodDisruptionBudget that keeps voluntary evictions from breaking quorum.",
                {
                    "enabled": _bool("Create the PodDisruptionBudget.", **SPEC_FIELDS["podDisruptionBudget.enabled"].bounds()),
                    "minAvailable": {
                        "description": "Pods that must stay available, as a number or a percentage; "
                                       "the quorum (replicas/2+1) when unset.",
                        # The apiserver accepts only this exact anyOf with int-or-string.
                        "anyOf": [{"type": "integer"}, {"type": "string"}],
                        "minimum": 0,
                        "pattern": "^[0-9]+%?$",
                        "x-kubernetes-int-or-string": True,
                    },
                },
                default={},
            ),
            "repair": _obj(
                "How a member whose data is corrupt, or whose store crash-loops, is repaired: replaced by a "
                "new member on fresh data (its old data kept aside until the new member votes). A replacement "
                "never runs in a cluster without quorum, and one at a time. Any member is replaced on request "
                "with `kubectl annotate pod <pod> raftset.dev/replace=true`.",
                {
                    "policy": _enum("Manual: report such a member (Degraded, reason ReplaceNeeded) and wait for "
                                    "a request; Automatic: replace it without asking.",
                                    list(fields.REPAIR_POLICIES), default=SPEC_FIELDS["repair.policy"].default),
                    "crashLoopRestarts": _int(
                        "Store restarts after which a member that does not serve counts as crash-looping.",
                        **SPEC_FIELDS["repair.crashLoopRestarts"].bounds()),
                },
                default={},
            ),
            "sidecar": _obj(
                "The membership sidecar that runs next to the store in every pod.",
                {
                    "image": _str("Image of the sidecar; the operator's own image when unset.",
                                  minLength=1, maxLength=512),
                    "heartbeatIntervalSeconds": _int(
                        "How often the sidecar refreshes its heartbeat record when nothing changed.",
                        **SPEC_FIELDS["sidecar.heartbeatIntervalSeconds"].bounds()),
                    "cleanIntervalSeconds": _int(
                        "How often the membership-clean task looks for members whose pods are gone.",
                        **SPEC_FIELDS["sidecar.cleanIntervalSeconds"].bounds()),
                    "cleanGracePeriodSeconds": _int(
                        "How long a member must have been absent before membership-clean removes it (20 s, or this if "
                        "shorter, for a member of an ordinal the workload no longer keeps whose pod is gone).",
                        **SPEC_FIELDS["sidecar.cleanGracePeriodSeconds"].bounds()),
                    "resources": _resources("Compute resources of the sidecar container."),
                },
                default={},
            ),
            "recovery": _obj(
                "What the operator does when a majority of members is gone for good, or a member's node "
                "with its data (docs/operations.md, \"Quorum loss\", \"Node loss\").",
                {
                    "quorumLoss": _enum(
                        "Manual: report QuorumLost and wait for the annotation raftset.dev/recover-quorum "
                        "(auto or a pod name). Automatic: recover from the most up-to-date survivor once "
                        "quorum has been lost for the grace period.",
                        list(fields.QUORUM_LOSS_POLICIES), **SPEC_FIELDS["recovery.quorumLoss"].bounds()),
                    "quorumLossGracePeriodSeconds": _int(
                        "How long quorum must have been lost before an Automatic recovery starts.",
                        **SPEC_FIELDS["recovery.quorumLossGracePeriodSeconds"].bounds()),
                    "nodeLoss": _enum(
                        "A member whose node is not Ready while its data lives only there (a local "
                        "PersistentVolume or an emptyDir). Automatic: after the grace period, the leader's "
                        "sidecar removes it from Raft if it does not answer and a quorum stays, then its pod "
                        "and claim are deleted and it comes back on another node as a new member. Manual: "
                        "reported (Degraded NodeLost); the same happens once the pod carries "
                        "raftset.dev/replace=true.",
                        list(fields.NODE_LOSS_POLICIES), **SPEC_FIELDS["recovery.nodeLoss"].bounds()),
                    "nodeLossGracePeriodSeconds": _int(
                        "How long a member's node must have been not Ready before its member is replaced "
                        "(nodeLoss Automatic).",
                        **SPEC_FIELDS["recovery.nodeLossGracePeriodSeconds"].bounds()),
                },
                default={},
            ),
            "maintenance": _obj(
                "Upkeep the leader's sidecar carries out, one member at a time and the leader last; "
                "a NOSPACE alarm is always handled (compaction, defragmentation, disarm).",
                {
                    "defrag": _obj(
                        "When members are defragmented besides after a NOSPACE alarm (Xline cannot defragment).",
                        {
                            "schedule": _str(
                                "Cron schedule (UTC) of a defragmentation of every member; empty for none.",
                                maxLength=128, **SPEC_FIELDS["maintenance.defrag.schedule"].bounds()),
                            "thresholdPercent": _int(
                                "Defragment a member whose free pages reach this share of its backend file "
                                "(and at least 64 MiB); 0 turns it off.",
                                **SPEC_FIELDS["maintenance.defrag.thresholdPercent"].bounds()),
                        },
                        default={},
                    ),
                    "hashCheckIntervalSeconds": _int(
                        "Seconds between the leader's comparisons of every voter's data (HashKV at the highest "
                        "revision all have applied); a member whose data alone differs from a majority's goes to "
                        "repair (spec.repair.policy). 0 turns it off.",
                        **SPEC_FIELDS["maintenance.hashCheckIntervalSeconds"].bounds()),
                },
                default={},
            ),
        },
        rules=[
            _immutable_once_set("", "workloadKind"),
            # Unset means the default class, which the claims already have: setting it later
            # would change the template and never the claims (issue 14).
            _immutable(".storage", "storageClassName",
                       "the members' PersistentVolumeClaims keep the class they were made with"),
            # Switching providers changes the members' URLs (http/https) or their CA: the
            # members would stop trusting each other halfway through the roll.
            _immutable_once_set(".tls", "provider"),
            _immutable("", "bootstrap", "it only matters when a cluster is created"),
            _rule("!has(self.bootstrap) || !has(self.bootstrap.fromBackup) || has(self.bootstrap.fromBackup.s3) "
                  "|| has(self.bootstrap.fromBackup.pvc) || has(self.backup)",
                  "spec.bootstrap.fromBackup needs s3 or pvc, or spec.backup to read from"),
            _rule("!has(oldSelf.storage) || !has(self.storage) || "
                  "(has(self.storage.ephemeral) && self.storage.ephemeral) == "
                  "(has(oldSelf.storage.ephemeral) && oldSelf.storage.ephemeral)",
                  "spec.storage.ephemeral is immutable: create a new cluster to change it"),
        ],
        default={},
    )


# --- status -----------------------------------------------------------------------------


def _status() -> Schema:
    condition = _obj(
        "One observation of the cluster's state (metav1.Condition).",
        {
            "type": _str("Available, Progressing, Degraded, Encrypted, OddReplicas, QuorumLost or BackupReady.", maxLength=316),
            "status": _enum("True, False or Unknown.", ["True", "False", "Unknown"]),
            "reason": _str("One CamelCase word saying why.", maxLength=1024),
            "message": _str("What happened, for a person.", maxLength=32768),
            "lastTransitionTime": _str("When status last changed.", format="date-time"),
            "observedGeneration": _int("The metadata.generation this condition was computed from.",
                                       format="int64", minimum=0),
        },
        required=["type", "status", "lastTransitionTime"],
    )
    member = _obj(
        "One member: Raft membership as the leader published it, joined with the pod's heartbeat.",
        {
            "name": _str("The member's pod name (its Raft name, or its ID when no pod of this cluster matches)."),
            "id": _str("Raft member ID in hexadecimal."),
            "role": _enum("The member's role.", list(contract.ROLES)),
            "learner": _bool("Whether Raft lists the member as a non-voting learner."),
            "inRaft": _bool("Whether the published Raft membership lists the member; "
                            "false for a pod whose heartbeat names a member Raft does not have."),
            "healthy": _bool("Whether the member answered its last health check (Status names a leader, "
                             "no error)."),
            "ready": _bool("Whether a linearizable read went through the member at its last check (its "
                           "/readyz); Available needs a quorum of healthy voters that are ready."),
            "indexLag": _int("How far the member's raft index trailed the leader's when the membership "
                             "was published.", format="int64", minimum=0),
            "lastHeartbeat": _str("When the member's sidecar last renewed its heartbeat, as of the last status write: "
                                  "while nothing else in the status changes, it is written again once it is "
                                  "RAFTSET_STATUS_REFRESH_SECONDS (600 s) old; `kubectl raftset status` reads "
                                  "the live age from the heartbeat Leases.", format="date-time"),
        },
        required=["name"],
    )
    return _obj(
        "The observed state, written by the operator.",
        {
            "observedGeneration": _int("The metadata.generation the operator last acted on.",
                                       format="int64", minimum=0),
            "replicas": _int("Current number of members (the scale subresource's status replicas).",
                             format="int32", minimum=0),
            "readyReplicas": _int("Members whose pods are ready.", format="int32", minimum=0),
            "selector": _str("Label selector of the members' pods, for the scale subresource."),
            "leader": _str("Pod name of the Raft leader, empty when unknown."),
            "version": _str("The store version every member runs: it moves once a version change has "
                            "rolled through all of them.", maxLength=64),
            "members": {
                "type": "array", "description": "The cluster's Raft members.", "items": member,
                "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            },
            "disagreements": {
                "type": "array",
                "description": "Where Raft membership, the workload's pods and the heartbeats differ, one "
                               "sentence each: a member in Raft with no pod, a pod with no member.",
                "items": _str("One disagreement."),
            },
            "replacements": {
                "type": "array",
                "description": "Members being replaced (pod annotation raftset.dev/replace=true, or a repair), "
                               "one row per pod, as its sidecar records each step.",
                "items": _obj("One replacement in progress.", {
                    "pod": _str("The pod whose member is replaced."),
                    "phase": _enum("The step it is at.", [str(p) for p in contract.ReplacePhase
                                                          if p not in (contract.ReplacePhase.DONE,
                                                                       contract.ReplacePhase.WITHDRAWN)]),
                    "message": _str("What happens now, or why it waits.", maxLength=32768),
                    "oldMember": _str("Raft member ID (hexadecimal) being replaced."),
                    "newMember": _str("Raft member ID (hexadecimal) that replaces it, once added."),
                    "steps": {"type": "array", "description": "Every phase so far, in order.",
                              "items": _str("One phase.")},
                    "cause": _str("Why it began: a person's request (raftset.dev/replace=true), or the sidecar's "
                                  "diagnosis (corrupt data, a crash loop, the leader's verdict on a CORRUPT alarm).",
                                  maxLength=32768),
                }, required=["pod", "phase"]),
                "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["pod"],
            },
            "narrated": {
                "type": "array",
                "description": "How far the operator told each pod's replacement record as Events, one row per pod: "
                               "every step is told once, however quickly it ran, also after an operator restart.",
                "items": _obj("One pod's last replacement record, as far as it was told.", {
                    "pod": _str("The pod whose sidecar keeps the record."),
                    "replacement": _str("The replacement's id (the record's)."),
                    "steps": _int("How many of its steps were told.", minimum=0),
                }, required=["pod", "replacement", "steps"]),
                "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["pod"],
            },
            "workloadKind": _enum("The workload that runs the pods.", list(workloads.BACKENDS)),
            "reservedOrdinals": {
                "type": "array",
                "description": "Ordinals held empty by the Advanced StatefulSet after a leader-aware scale-in.",
                "items": _int("One reserved ordinal.", minimum=0),
            },
            "conditions": {
                "type": "array", "description": "Available, Progressing and Degraded; Encrypted (False when spec.tls.provider is disabled) "
                                             "and OddReplicas (False for an even spec.replicas, with the quorum arithmetic).", "items": condition,
                "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
            },
            "backup": _obj(
                "The last backup that succeeded and the last one that failed, as the leader's sidecar "
                "reported them.",
                {
                    "lastSuccess": _obj("The newest published backup.", {
                        "time": _str("When it was taken.", format="date-time"),
                        "revision": _int("The store revision it holds (at least).", format="int64", minimum=0),
                        "size": _int("Size in bytes.", format="int64", minimum=0),
                        "key": _str("Object key (or path below the volume)."),
                        "sha256": _str("sha256 of the snapshot, verified after upload."),
                    }),
                    "lastFailure": _obj("The newest failed attempt.", {
                        "time": _str("When it failed.", format="date-time"),
                        "reason": _str("One CamelCase word, as in the BackupReady condition."),
                        "message": _str("What went wrong."),
                    }),
                    "abortedUploads": _int(
                        "Abandoned incomplete uploads (older than spec.backup.retention."
                        "abortIncompleteUploadsAfter) the leader's sidecars have aborted; absent while none.",
                        format="int64", minimum=0),
                    "failures": _int("Failed attempts, ever (only the last one's details are kept); absent while none.",
                                     format="int64", minimum=0),
                },
            ),
            "kopf": _opaque("Bookkeeping of the kopf framework the operator runs on."),
        },
    )


# --- the CRD -------------------------------------------------------------------------


def crd(engine: engines.Engine) -> dict[str, Any]:
    """The CustomResourceDefinition of `engine`'s cluster kind."""
    root = _obj(
        f"{engine.kind} runs an {engine.name} cluster as a StatefulSet or an OpenKruise Advanced StatefulSet.",
        {
            "apiVersion": _str("Versioned schema of this object."),
            "kind": _str("REST resource this object represents."),
            # Only name and generateName may be declared here; their maxLength bounds the
            # cost the apiserver estimates for the name rules below.
            "metadata": {"type": "object", "properties": {
                "name": _str("Name of the cluster; its pods are <name>-<ordinal>.", maxLength=253),
                "generateName": _str("Prefix for a generated name.", maxLength=253),
            }},
            "spec": _spec(engine),
            "status": _status(),
        },
        rules=[
            _rule(f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
                  f"metadata.name must be at most {MAX_NAME_LENGTH} characters so that pod and revision names fit"),
            _rule(f"self.metadata.name.matches('{DNS_LABEL}')",
                  "metadata.name must be a DNS label: lowercase letters, digits and '-', starting with a letter"),
            # spec.workloadKind may be set once, but not to another kind than the one already rendered.
            _rule("!has(oldSelf.status) || !has(oldSelf.status.workloadKind) || !has(self.spec) || "
                  "!has(self.spec.workloadKind) || self.spec.workloadKind == oldSelf.status.workloadKind",
                  "spec.workloadKind must be the workload kind the cluster already runs on (status.workloadKind): "
                  "create a new cluster to change it"),
        ],
    )
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{engine.plural}.{contract.GROUP}",
            "labels": {contract.LABEL_PART_OF: contract.MANAGER},
        },
        "spec": {
            "group": contract.GROUP,
            "names": {
                "kind": engine.kind,
                "listKind": f"{engine.kind}List",
                "plural": engine.plural,
                "singular": engine.kind.lower(),
                "shortNames": [engine.short_name],
                "categories": [contract.MANAGER],
            },
            "scope": "Namespaced",
            "versions": [{
                "name": contract.VERSION,
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                "additionalPrinterColumns": [
                    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas",
                     "description": "Members whose pods are ready."},
                    {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas",
                     "description": "Desired number of members."},
                    {"name": "Leader", "type": "string", "jsonPath": ".status.leader",
                     "description": "Pod of the Raft leader."},
                    {"name": "Workload", "type": "string", "jsonPath": ".status.workloadKind",
                     "description": "StatefulSet or AdvancedStatefulSet."},
                    {"name": "Version", "type": "string", "jsonPath": ".status.version",
                     "description": "The store version every member runs."},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": root},
            }],
        },
    }


def schema_of(engine: engines.Engine) -> Schema:
    return crd(engine)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


# --- rendering to files -----------------------------------------------------------------


def to_yaml(doc: Mapping[str, Any]) -> str:
    header = "# Generated by `python -m tools.crdgen` from tools/crdgen.py: do not edit.\n"
    return header + yaml.safe_dump(doc, sort_keys=False, width=120)


def crd_filename(engine: engines.Engine) -> str:
    return f"{engine.plural}.{contract.GROUP}.yaml"


def _walk(schema: Schema, path: str) -> Iterator[tuple[str, Schema]]:
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}" if path else name)
    if "items" in schema:
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}.<key>")


def _type_of(schema: Schema) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "int or string"
    kind = schema.get("type", "")
    if kind == "object" and "additionalProperties" in schema:
        return "map"
    if kind == "object" and schema.get("x-kubernetes-preserve-unknown-fields"):
        return "object (free-form)"
    return kind


def _constraints(schema: Schema) -> str:
    parts: list[str] = []
    if "enum" in schema:
        parts.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    for key, label in (("minimum", "min"), ("maximum", "max"), ("minLength", "min length"),
                       ("maxLength", "max length"), ("maxProperties", "max entries"),
                       ("format", "format")):
        if key in schema:
            parts.append(f"{label} {schema[key]}")
    if "pattern" in schema:
        parts.append(f"pattern `{schema['pattern']}`")
    return "; ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def reference_markdown() -> str:
    """docs/crd-reference.md: every field of both kinds, from the schema's own descriptions."""
    schema = schema_of(engines.ETCD)
    lines = [
        "# CRD reference",
        "",
        "<!-- Generated by `python -m tools.crdgen` from tools/crdgen.py: do not edit. -->",
        "",
        f"`{contract.API_VERSION}` has two kinds with the same fields: "
        + ", ".join(f"`{e.kind}` (short name `{e.short_name}`, plural `{e.plural}`)" for e in engines.ENGINES.values())
        + ". They differ only in the image and in the engine flags that `spec.options` refuses; the "
        "descriptions below are EtcdCluster's (`kubectl explain xlinecluster.spec` shows Xline's).",
        "",
        "Both have the `status` and `scale` subresources (`kubectl scale` sets `spec.replicas`) and the "
        "printer columns Ready, Desired, Leader, Workload, Version and Age.",
        "",
        "## Fields",
        "",
        "| field | type | default | validation | description |",
        "|---|---|---|---|---|",
    ]
    for section in ("spec", "status"):
        for path, node in _walk(schema["properties"][section], section):
            default = f"`{json.dumps(node['default'])}`" if "default" in node else ""
            lines.append(f"| `{path}` | {_type_of(node)} | {default} | {_cell(_constraints(node))} "
                         f"| {_cell(node.get('description', ''))} |")
    lines += ["", "## Validation rules (CEL)", "",
              "Checked by the apiserver on every write; transition rules (those using `oldSelf`) on updates.", "",
              "| where | rule | message |", "|---|---|---|"]
    rows = [(path or "(root)", rule) for path, node in _walk(schema, "")
            for rule in node.get("x-kubernetes-validations", []) if path != "spec.options"]
    rows += [("spec.options", rule) for rule in schema["properties"]["spec"]["properties"]["options"]
             ["x-kubernetes-validations"] if rule["rule"].startswith("self.")]
    for where, rule in rows:
        lines.append(f"| `{where}` | `{_cell(rule['rule'])}` | {_cell(rule['message'])} |")
    for engine in engines.ENGINES.values():
        flags = ", ".join(f"`{flag}`" for flag in sorted(engine.owned_flags))
        lines.append(f"| `spec.options` ({engine.kind}) | `!('<flag>' in self)`, one rule for each of {flags} "
                     f"| {_cell(owned_flag_rule(engine, '<flag>')['message'])} |")
    lines.append("")
    return "\n".join(lines)


def rendered_files() -> dict[Path, str]:
    """Every generated file, by path, with its content."""
    files: dict[Path, str] = {}
    for engine in engines.ENGINES.values():
        text = to_yaml(crd(engine))
        files[CRD_DIR / crd_filename(engine)] = text
    files[REFERENCE_DOC] = reference_markdown()
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.crdgen", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, text in rendered_files().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for path in stale:
        print(f"{'stale' if args.check else 'wrote'} {path.relative_to(REPO_ROOT)}")
    # The Helm chart's copy of the CRDs follows the one copy (tools/chartgen.py).
    chart = chartgen.main(argv)
    return 1 if args.check and (stale or chart) else 0


if __name__ == "__main__":
    sys.exit(main())
