"""The spec's scalar fields with their defaults and bounds: one table for the CRD and the parser.

The CRD schema (tools/crdgen.py) publishes these defaults and bounds to the apiserver, and
`raftset.operator.pure.spec` applies the same ones to a body that was written before a default
existed; reading both from here keeps them from drifting (etcd-io/etcd-operator derives its
CRD from its Go types for the same reason).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raftset import contract


@dataclass(frozen=True)
class Field:
    """One field below `spec`, named by its dotted path (`sidecar.cleanIntervalSeconds`)."""

    path: str
    default: Any
    minimum: int | None = None
    maximum: int | None = None
    enum: tuple[str, ...] = ()

    def bounds(self) -> dict[str, Any]:
        """The JSON-schema keywords this field's bounds become."""
        keywords: dict[str, Any] = {"default": self.default}
        if self.minimum is not None:
            keywords["minimum"] = self.minimum
        if self.maximum is not None:
            keywords["maximum"] = self.maximum
        return keywords


RETENTION = ("Retain", "Delete")
TLS_PROVIDERS = ("auto", "cert-manager", "disabled")
ISSUER_KINDS = ("Issuer", "ClusterIssuer")
QUORUM_LOSS_POLICIES = ("Manual", "Automatic")
# Automatic: a member whose node is lost with its data is replaced after the grace period
# (raftset.nodeloss); Manual: reported, and replaced once its pod carries the replace request.
NODE_LOSS_POLICIES = ("Automatic", "Manual")
# Manual: a corrupt or crash-looping member is reported (Degraded ReplaceNeeded) and replaced
# only on request; Automatic: its sidecar replaces it, with the same quorum rules as a request.
REPAIR_POLICIES = ("Manual", "Automatic")

SPEC_FIELDS: dict[str, Field] = {f.path: f for f in (
    Field("replicas", 3, minimum=1, maximum=contract.MAX_REPLICAS),
    # Twice the backend quota (a defragmentation's copy) plus WAL headroom: raftset.operator.pure.space.
    Field("storage.size", "5Gi"),
    Field("storage.ephemeral", False),
    Field("storage.retentionPolicy.whenScaled", "Retain", enum=RETENTION),
    Field("storage.retentionPolicy.whenDeleted", "Retain", enum=RETENTION),
    Field("tls.provider", "auto", enum=TLS_PROVIDERS),
    Field("tls.issuerRef.kind", "Issuer", enum=ISSUER_KINDS),
    Field("tls.issuerRef.group", "cert-manager.io"),
    Field("podDisruptionBudget.enabled", True),
    Field("sidecar.heartbeatIntervalSeconds", 10, minimum=1, maximum=3600),
    Field("sidecar.cleanIntervalSeconds", 30, minimum=1, maximum=86400),
    Field("sidecar.cleanGracePeriodSeconds", 300, minimum=0, maximum=604800),
    Field("recovery.quorumLoss", "Manual", enum=QUORUM_LOSS_POLICIES),
    Field("recovery.quorumLossGracePeriodSeconds", 300, minimum=0, maximum=86400),
    Field("recovery.nodeLoss", "Automatic", enum=NODE_LOSS_POLICIES),
    # Kubernetes' own default toleration of an unreachable node (300 s) before it evicts pods.
    Field("recovery.nodeLossGracePeriodSeconds", 300, minimum=30, maximum=86400),
    Field("backup.retention.abortIncompleteUploadsAfter", "24h"),
    Field("backup.s3.region", "us-east-1"),
    Field("backup.s3.caSecret.key", "ca.crt"),
    Field("maintenance.defrag.schedule", ""),
    Field("maintenance.defrag.thresholdPercent", 50, minimum=0, maximum=100),
    # The sidecar's own default (raftset.sidecar.pure.config): rendered only when it differs.
    Field("maintenance.hashCheckIntervalSeconds", 300, minimum=0, maximum=86400),
    Field("repair.policy", "Manual", enum=REPAIR_POLICIES),
    Field("repair.crashLoopRestarts", 5, minimum=2, maximum=1000),
)}

# A five-field cron expression or one of its @-names; croniter checks the values
# (the sidecar and the operator report what the pattern lets through: `61 * * * *`).
CRON_PATTERN = (r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)"
                r"|[0-9A-Za-z*/,?-]+( +[0-9A-Za-z*/,?-]+){4})$")
AGE_PATTERN = r"^([0-9]+d)?([0-9]+h)?([0-9]+m)?$"
# An AGE_PATTERN value of at least one hour: a non-zero day or hour count, or 60 minutes or more.
# The CRD's CEL rule on abortIncompleteUploadsAfter (raftset.backups.ABORT_UPLOADS_FLOOR says why).
AT_LEAST_AN_HOUR = (r"^(0*[1-9][0-9]*d|([0-9]+d)?0*[1-9][0-9]*h"
                    r"|([0-9]+d)?([0-9]+h)?0*([1-9][0-9]{2,}|[6-9][0-9])m$)")


def default(path: str) -> Any:
    return SPEC_FIELDS[path].default
