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

# Paths inside the pod.
DATA_MOUNT = "/var/lib/raftset"
DATA_DIR = f"{DATA_MOUNT}/data"
RUN_MOUNT = "/var/run/raftset"  # emptyDir shared by sidecar and store: startup config
TLS_MOUNT = "/etc/raftset/tls"


def lease_name(pod_name: str) -> str:
    """The heartbeat Lease of the member that runs in `pod_name`."""
    return f"{pod_name}-member"


def membership_lease_name(cluster: str) -> str:
    """The one Lease that carries the cluster's Raft membership."""
    return f"{cluster}-membership"


def peer_service_name(cluster: str) -> str:
    """The headless Service that gives every pod a stable DNS name."""
    return f"{cluster}-peer"


def client_service_name(cluster: str) -> str:
    return f"{cluster}-client"


def pod_name(cluster: str, ordinal: int) -> str:
    return f"{cluster}-{ordinal}"


def ordinal_of(pod: str) -> int:
    """The StatefulSet ordinal at the end of a pod name; ValueError if there is none."""
    _, _, tail = pod.rpartition("-")
    return int(tail)


def selector_labels(cluster: str) -> dict[str, str]:
    return {LABEL_NAME: MANAGER, LABEL_INSTANCE: cluster}


def quorum(voters: int) -> int:
    """The smallest majority of `voters`."""
    return voters // 2 + 1


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
    HTTP_ADDRESS = "RAFTSET_HTTP_ADDRESS"
    DATA_DIR = "RAFTSET_DATA_DIR"
    RUN_DIR = "RAFTSET_RUN_DIR"
    TLS_DIR = "RAFTSET_TLS_DIR"
    HEARTBEAT_INTERVAL = "RAFTSET_HEARTBEAT_INTERVAL"
    POLL_INTERVAL = "RAFTSET_POLL_INTERVAL"
    CLEAN_INTERVAL = "RAFTSET_CLEAN_INTERVAL"
    CLEAN_GRACE = "RAFTSET_CLEAN_GRACE"
    LEAVE_TIMEOUT = "RAFTSET_LEAVE_TIMEOUT"
    OPTIONS = "RAFTSET_OPTIONS"
    LOG_LEVEL = "RAFTSET_LOG_LEVEL"
