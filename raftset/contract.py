"""Names shared by the operator, the sidecar, the CRDs and the tests.

The operator and the sidecars never call each other: they meet in the Kubernetes API.
Every label, annotation and object name they both read or write is defined here once.
"""

from __future__ import annotations

from enum import StrEnum

GROUP = "raftset.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

KIND_ETCD = "EtcdCluster"
KIND_XLINE = "XlineCluster"
PLURAL_ETCD = "etcdclusters"
PLURAL_XLINE = "xlineclusters"

# Recommended labels (app.kubernetes.io/*) plus our own selector labels.
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"
MANAGER = "raftset"

LABEL_CLUSTER = f"{GROUP}/cluster"
LABEL_ENGINE = f"{GROUP}/engine"
# "true" on each cluster's metrics Service: the monitoring kit's ServiceMonitor selects it.
LABEL_METRICS = f"{GROUP}/metrics"
# Written by each sidecar on its own pod: leader | follower | learner | unknown.
LABEL_ROLE = f"{GROUP}/role"

# Heartbeat Lease of one member: one per pod, renewed by that pod's sidecar.
ANNOTATION_HEARTBEAT = f"{GROUP}/heartbeat"  # the heartbeat JSON, as served on GET /heartbeat
LABEL_HEARTBEAT = f"{GROUP}/heartbeat"  # "true" on every heartbeat Lease, for list selectors

# The Raft membership as the leader sees it: one Lease per cluster, written by whichever
# sidecar leads, with the record (raftset.membership) in an annotation.
ANNOTATION_MEMBERSHIP = f"{GROUP}/membership"
LABEL_MEMBERSHIP = f"{GROUP}/membership"  # "true" on the membership Lease, for the operator's watch

# On the workload, written in the same apply as the scale step it records
# (raftset.membership.ScaleStep): a restarted operator knows which step it waits for.
ANNOTATION_SCALE_STEP = f"{GROUP}/scale-step"

# Moves when the mounted certificates are replaced: on the TLS Secrets (the provider's
# revision) and on the pod template (so that the workload rolls one pod at a time).
ANNOTATION_TLS_REVISION = f"{GROUP}/tls-revision"

# Written by the operator on a pod it has chosen to scale away; the sidecar treats it as
# authoritative in addition to what the workload object says.
ANNOTATION_SCALE_AWAY = f"{GROUP}/scale-away"

# Quorum loss (issue 12). A person asks for a recovery by annotating the cluster object:
# "auto" (the most up-to-date reachable survivor) or a pod name. The operator records the
# recovery it runs (raftset.quorum_loss.QuorumLossRecord) on the workload, where every sidecar
# reads it at join time: the record, not the operator's memory, says which step is next.
ANNOTATION_RECOVER_QUORUM = f"{GROUP}/recover-quorum"
RECOVER_QUORUM_AUTO = "auto"
ANNOTATION_QUORUM_RECOVERY = f"{GROUP}/quorum-recovery"
# Backups (docs/backups.md). A user asks for one at once with this annotation on the
# cluster object; the operator moves it, as a request id, to ANNOTATION_BACKUP_REQUEST on the
# cluster's backup Lease and removes it from the cluster object (a member may only `get` the
# cluster object: patching it would let a pod change the spec). The leader's sidecar serves a
# request id its record has not served yet and publishes every attempt's outcome on the same
# Lease, which the operator turns into status.backup, the BackupReady condition and Events.
ANNOTATION_BACKUP_NOW = f"{GROUP}/backup-now"
ANNOTATION_BACKUP_REQUEST = f"{GROUP}/backup-request"  # on the backup Lease, written by the operator
ANNOTATION_BACKUP_RECORD = f"{GROUP}/backup"  # raftset.backups.Record as JSON
LABEL_BACKUP = f"{GROUP}/backup"  # "true" on the backup Lease, for the operator's watch
# A restore that cannot proceed (missing or corrupt snapshot, no restore for the engine):
# the first member's sidecar writes the reason here, on the same Lease.
ANNOTATION_RESTORE_FAILURE = f"{GROUP}/restore-failure"
ANNOTATION_RESTORE_SOURCE = f"{GROUP}/restore-source"  # the snapshot key every member of one restore uses
BACKUP_CREDENTIALS_MOUNT = "/etc/raftset/backup-credentials"  # accessKeyID, secretAccessKey
BACKUP_CA_MOUNT = "/etc/raftset/backup-ca"  # ca.crt
BACKUP_VOLUME_MOUNT = "/var/lib/raftset-backups"  # spec.backup.pvc
RESTORE_CREDENTIALS_MOUNT = "/etc/raftset/restore-credentials"
RESTORE_CA_MOUNT = "/etc/raftset/restore-ca"
RESTORE_VOLUME_MOUNT = "/var/lib/raftset-restore"
ACCESS_KEY_FILE = "accessKeyID"
SECRET_KEY_FILE = "secretAccessKey"
CA_FILE = "ca.crt"
# Replace a member at the same size: the user sets ANNOTATION_REPLACE=true on the pod; the
# pod's sidecar records each step in ANNOTATION_REPLACE_PROGRESS (raftset.replace.Progress),
# clears the request once the new member votes and leaves the record finished (Done) until the
# pod's next replacement; the operator narrates the record, each step once.
ANNOTATION_REPLACE = f"{GROUP}/replace"
ANNOTATION_REPLACE_PROGRESS = f"{GROUP}/replace-progress"
# The store container's restartCount when the member last finished a replacement: a crash
# loop is counted from there, not from the pod's start (written by the sidecar).
ANNOTATION_RESTART_BASELINE = f"{GROUP}/restart-baseline"
# A CORRUPT alarm's verdict (raftset.sidecar.pure.corruption.Record), written by the leader's sidecar
# on the accused member's pod: that pod's sidecar takes it as a diagnosis while the alarm stands
# (replaced under spec.repair.policy Automatic when certain; reported as Needed otherwise) and
# clears it with the other replace annotations.
ANNOTATION_CORRUPTION = f"{GROUP}/corruption"
# A member lost with its node (raftset.nodeloss): the operator's mark on the pod (a Mark) once the
# node has not been Ready for spec.recovery.nodeLossGracePeriodSeconds, and the leader's sidecar's
# record on the same pod that it removed the member (a Removal).
ANNOTATION_NODE_LOST = f"{GROUP}/node-lost"
ANNOTATION_NODE_LOST_REMOVAL = f"{GROUP}/node-lost-removal"


class ReplacePhase(StrEnum):
    """The steps of one replacement, as the sidecar records them and the operator narrates them."""

    REQUESTED = "Requested"  # annotated; the pod's sidecar has not answered yet (the operator's word)
    QUEUED = "Queued"  # another membership change is under way: one at a time
    WAITING = "Waiting"  # blocked: it would lose quorum, or nobody can take over as leader
    NEEDED = "Needed"  # corrupt or crash-looping, and spec.repair.policy is Manual: a person decides
    HANDING_OFF = "HandingOff"  # the member leads: leadership moves first
    REMOVING = "Removing"  # MemberRemove of the old member
    REJOINING = "Rejoining"  # old member gone; data moved aside; joining again as a new learner
    LEARNER = "Learner"  # the new member catches up
    DONE = "Done"  # the new member votes; the request cleared, the record kept finished
    WITHDRAWN = "Withdrawn"  # the annotation went away before the member left


ROLE_LEADER = "leader"
ROLE_FOLLOWER = "follower"
ROLE_LEARNER = "learner"
ROLE_UNKNOWN = "unknown"
ROLES = (ROLE_LEADER, ROLE_FOLLOWER, ROLE_LEARNER, ROLE_UNKNOWN)

# Size limits. The CRD allows MAX_REPLICAS members; with Advanced StatefulSet reserved
# ordinals a pod can carry a higher ordinal, and the planner refills reserved ordinals before it grows,
# so ordinals 0..NAMED_ORDINALS-1 name every pod a valid cluster runs. Certificates and
# the member Role name exactly these (a wildcard / a wider Role covers the rest).
MAX_REPLICAS = 9
NAMED_ORDINALS = 16

# Ports, the same for both engines.
CLIENT_PORT = 2379
PEER_PORT = 2380
SIDECAR_PORT = 8080
# The store's own Prometheus endpoint (etcd's --listen-metrics-urls, Xline's --metrics-port).
METRICS_PORT = 2381

# Paths inside the pod.
DATA_MOUNT = "/var/lib/raftset"
DATA_DIR = f"{DATA_MOUNT}/data"
RUN_MOUNT = "/var/run/raftset"  # emptyDir shared by sidecar and store: startup config
TLS_MOUNT = "/etc/raftset/tls"
# Where the sidecar sees the store's scratch volume (engines.Scratch), for an engine that has one.
SCRATCH_MOUNT = "/var/lib/raftset-scratch"


def lease_name(pod_name: str) -> str:
    """The heartbeat Lease of the member that runs in `pod_name`."""
    return f"{pod_name}-member"


def restore_lease_name(cluster: str) -> str:
    """The Lease that pins which snapshot a cluster seeded from a backup restores."""
    return f"{cluster}-restore"


def membership_lease_name(cluster: str) -> str:
    """The one Lease that carries the cluster's Raft membership."""
    return f"{cluster}-membership"


def backup_lease_name(cluster: str) -> str:
    """The one Lease that carries the cluster's backup record."""
    return f"{cluster}-backup"


def peer_service_name(cluster: str) -> str:
    """The headless Service that gives every pod a stable DNS name."""
    return f"{cluster}-peer"


def metrics_service_name(cluster: str) -> str:
    """The headless Service over the members' metrics ports (the store's and the sidecar's)."""
    return f"{cluster}-metrics"


def client_service_name(cluster: str) -> str:
    return f"{cluster}-client"


def pod_name(cluster: str, ordinal: int) -> str:
    return f"{cluster}-{ordinal}"


def ordinal_of(pod: str) -> int:
    """The StatefulSet ordinal at the end of a pod name; ValueError if there is none."""
    _, _, tail = pod.rpartition("-")
    return int(tail)


def member_ordinal(cluster: str, pod: str) -> int | None:
    """The ordinal of `pod` if it is named like a member of `cluster` (`<cluster>-<digits>`), else None.

    Anyone can create a pod with a cluster's labels (a debug copy, `<cluster>-canary`):
    such a stray is no member, and must not stop a reconcile (issue 11 i).
    """
    prefix, _, tail = pod.rpartition("-")
    if prefix != cluster or not tail.isascii() or not tail.isdigit():
        return None
    return int(tail)


def selector_labels(cluster: str) -> dict[str, str]:
    return {LABEL_NAME: MANAGER, LABEL_INSTANCE: cluster}


def label_selector(cluster: str) -> str:
    """`selector_labels` as a list call's labelSelector: the cluster's pods and PVCs."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(cluster).items()))


def quorum(voters: int) -> int:
    """The smallest majority of `voters`."""
    return voters // 2 + 1


# The sidecar process's environment besides its own settings: gRPC resolves names with the system's
# resolver (getaddrinfo, like every other client in the pod) rather than its bundled c-ares, whose code
# was 2.3 MiB of the sidecar's RSS (docs/sidecar.md, "Footprint"). The operator renders it; the local
# pod runners pass it too.
SIDECAR_PROCESS_ENV = {"GRPC_DNS_RESOLVER": "native"}


class SidecarEnv(StrEnum):
    """The sidecar's environment: the operator renders it, the sidecar reads it (docs/sidecar.md)."""

    POD_NAME = "RAFTSET_POD_NAME"
    NAMESPACE = "RAFTSET_NAMESPACE"
    CLUSTER = "RAFTSET_CLUSTER"
    ENGINE = "RAFTSET_ENGINE"
    WORKLOAD_KIND = "RAFTSET_WORKLOAD_KIND"
    WORKLOAD_NAME = "RAFTSET_WORKLOAD_NAME"
    PEER_URL_TEMPLATE = "RAFTSET_PEER_URL_TEMPLATE"
    CLIENT_URL_TEMPLATE = "RAFTSET_CLIENT_URL_TEMPLATE"
    LISTEN_PEER_URL = "RAFTSET_LISTEN_PEER_URL"
    LISTEN_CLIENT_URL = "RAFTSET_LISTEN_CLIENT_URL"
    LISTEN_METRICS_URL = "RAFTSET_LISTEN_METRICS_URL"
    HTTP_ADDRESS = "RAFTSET_HTTP_ADDRESS"
    DATA_DIR = "RAFTSET_DATA_DIR"
    RUN_DIR = "RAFTSET_RUN_DIR"
    TLS_DIR = "RAFTSET_TLS_DIR"
    SCRATCH_DIR = "RAFTSET_SCRATCH_DIR"
    HEARTBEAT_INTERVAL = "RAFTSET_HEARTBEAT_INTERVAL"
    POLL_INTERVAL = "RAFTSET_POLL_INTERVAL"
    CLEAN_INTERVAL = "RAFTSET_CLEAN_INTERVAL"
    CLEAN_GRACE = "RAFTSET_CLEAN_GRACE"
    PEER_STATUS_TIMEOUT = "RAFTSET_PEER_STATUS_TIMEOUT"
    LEAVE_TIMEOUT = "RAFTSET_LEAVE_TIMEOUT"
    LOOP_STALL = "RAFTSET_LOOP_STALL"
    REPAIR_POLICY = "RAFTSET_REPAIR_POLICY"
    CRASH_LOOP_RESTARTS = "RAFTSET_CRASH_LOOP_RESTARTS"
    OPTIONS = "RAFTSET_OPTIONS"
    MAINTENANCE_INTERVAL = "RAFTSET_MAINTENANCE_INTERVAL"
    HASH_CHECK_INTERVAL = "RAFTSET_HASH_CHECK_INTERVAL"
    DEFRAG_SCHEDULE = "RAFTSET_DEFRAG_SCHEDULE"
    DEFRAG_THRESHOLD_PERCENT = "RAFTSET_DEFRAG_THRESHOLD_PERCENT"
    DEFRAG_MIN_BYTES = "RAFTSET_DEFRAG_MIN_BYTES"
    LOG_LEVEL = "RAFTSET_LOG_LEVEL"
    BACKUP_INTERVAL = "RAFTSET_BACKUP_INTERVAL"
    # Prepended to the backup/restore mount paths; empty in a pod, a directory in tests.
    BACKUP_MOUNT_ROOT = "RAFTSET_BACKUP_MOUNT_ROOT"
    # What the pod mounts for spec.backup (raftset.backups.mounts); set only with spec.backup.
    BACKUP_MOUNTS = "RAFTSET_BACKUP_MOUNTS"
