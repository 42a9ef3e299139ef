"""The member pod template, one for both workload backends: the store, the sidecar, their volumes and probes.

Pure: a parsed `Cluster` in, a plain dict out (the workload component wraps it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from raftset import backups, contract, fields
from raftset.contract import SidecarEnv
from raftset.operator.pure import certificates, space
from raftset.operator.pure.objects import labels, member_service_account
from raftset.operator.pure.spec import Cluster

# Long enough for the preStop leave (MoveLeader + MemberRemove, each bounded by the
# sidecar's own timeouts) and a clean store shutdown.
TERMINATION_GRACE_SECONDS = 60


SIDECAR_CONTAINER = "sidecar"



def _url_template(cluster: Cluster, port: int) -> str:
    scheme = "https" if cluster.tls else "http"
    domain = f"{contract.peer_service_name(cluster.name)}.{cluster.namespace}.svc"
    return f"{scheme}://{{pod}}.{domain}:{port}"



def sidecar_env(cluster: Cluster) -> list[dict[str, Any]]:
    """The sidecar's whole configuration: see docs/sidecar.md for each variable."""
    scheme = "https" if cluster.tls else "http"
    plain = {
        SidecarEnv.NAMESPACE: cluster.namespace,
        SidecarEnv.CLUSTER: cluster.name,
        SidecarEnv.ENGINE: cluster.engine.name,
        SidecarEnv.WORKLOAD_KIND: cluster.backend.name,
        SidecarEnv.WORKLOAD_NAME: cluster.name,
        SidecarEnv.PEER_URL_TEMPLATE: _url_template(cluster, contract.PEER_PORT),
        SidecarEnv.CLIENT_URL_TEMPLATE: _url_template(cluster, contract.CLIENT_PORT),
        SidecarEnv.LISTEN_PEER_URL: f"{scheme}://0.0.0.0:{contract.PEER_PORT}",
        SidecarEnv.LISTEN_CLIENT_URL: f"{scheme}://0.0.0.0:{contract.CLIENT_PORT}",
        SidecarEnv.LISTEN_METRICS_URL: f"http://0.0.0.0:{contract.METRICS_PORT}",
        SidecarEnv.HTTP_ADDRESS: f"0.0.0.0:{contract.SIDECAR_PORT}",
        SidecarEnv.DATA_DIR: contract.DATA_DIR,
        SidecarEnv.RUN_DIR: contract.RUN_MOUNT,
        SidecarEnv.TLS_DIR: contract.TLS_MOUNT if cluster.tls else "",
        SidecarEnv.HEARTBEAT_INTERVAL: str(cluster.sidecar.heartbeat_interval),
        SidecarEnv.CLEAN_INTERVAL: str(cluster.sidecar.clean_interval),
        SidecarEnv.CLEAN_GRACE: str(cluster.sidecar.clean_grace),
        # The quota and auto-compaction the volume allows (raftset.operator.pure.space); spec.options wins.
        SidecarEnv.OPTIONS: json.dumps({**space.defaults(cluster.engine, cluster.storage.size), **cluster.options},
                                       sort_keys=True),
        SidecarEnv.DEFRAG_SCHEDULE: cluster.maintenance.defrag_schedule,
        SidecarEnv.DEFRAG_THRESHOLD_PERCENT: str(cluster.maintenance.defrag_threshold_percent),
        SidecarEnv.REPAIR_POLICY: cluster.repair.policy,
        SidecarEnv.CRASH_LOOP_RESTARTS: str(cluster.repair.crash_loop_restarts),
    }
    if cluster.maintenance.hash_check_interval != fields.default("maintenance.hashCheckIntervalSeconds"):
        # Only when tuned: a cluster on the default keeps its pod template, and rolls nothing.
        plain[SidecarEnv.HASH_CHECK_INTERVAL] = str(cluster.maintenance.hash_check_interval)
    if cluster.engine.scratch is not None:
        plain[SidecarEnv.SCRATCH_DIR] = contract.SCRATCH_MOUNT
    if cluster.backup:
        # Beside the volumes backup_volumes() mounts: the sidecar takes no backup until its pod
        # mounts what spec.backup names now (raftset.backups.unmounted; docs/backups.md).
        plain[SidecarEnv.BACKUP_MOUNTS] = backups.mounts(cluster.backup)
    return [
        {"name": SidecarEnv.POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        *({"name": k, "value": v} for k, v in {**plain, **contract.SIDECAR_PROCESS_ENV}.items()),
    ]



def _volume_mounts(cluster: Cluster, scratch_path: str | None) -> list[dict[str, Any]]:
    """The volumes both containers mount; the scratch volume where each sees it (None: not mounted)."""
    mounts = [
        {"name": "data", "mountPath": contract.DATA_MOUNT},
        {"name": "run", "mountPath": contract.RUN_MOUNT},
    ]
    if cluster.tls:
        mounts.append({"name": "tls", "mountPath": contract.TLS_MOUNT, "readOnly": True})
    if scratch_path is not None:
        mounts.append({"name": "scratch", "mountPath": scratch_path})
    return mounts



def _destination_volumes(raw: Mapping[str, Any] | None, name: str, credentials: str, ca: str,
                         volume: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The Secret(s) or claim a backup destination needs, and where the sidecar sees them.

    Secrets are optional volumes: a missing one does not stop the pod (the store must keep
    serving); the sidecar reports CredentialsRejected when it finds no files.
    """
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if not raw:
        return volumes, mounts
    s3, pvc = raw.get("s3"), raw.get("pvc")
    if s3:
        volumes.append({"name": f"{name}-credentials", "secret": {
            "secretName": s3["credentialsSecret"], "optional": True, "defaultMode": 0o440,
            "items": [{"key": k, "path": k} for k in (contract.ACCESS_KEY_FILE, contract.SECRET_KEY_FILE)]}})
        mounts.append({"name": f"{name}-credentials", "mountPath": credentials, "readOnly": True})
        ca_secret = s3.get("caSecret")
        if ca_secret:
            key = ca_secret.get("key") or contract.CA_FILE
            volumes.append({"name": f"{name}-ca", "secret": {
                "secretName": ca_secret["name"], "optional": True, "defaultMode": 0o440,
                "items": [{"key": key, "path": key}]}})
            mounts.append({"name": f"{name}-ca", "mountPath": ca, "readOnly": True})
    elif pvc:
        volumes.append({"name": f"{name}-volume", "persistentVolumeClaim": {"claimName": pvc["claimName"]}})
        mounts.append({"name": f"{name}-volume", "mountPath": volume})
    return volumes, mounts



def backup_volumes(cluster: Cluster) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Volumes and sidecar mounts for spec.backup and for spec.bootstrap.fromBackup's own source."""
    volumes, mounts = _destination_volumes(cluster.backup, "backup", contract.BACKUP_CREDENTIALS_MOUNT,
                                           contract.BACKUP_CA_MOUNT, contract.BACKUP_VOLUME_MOUNT)
    more_volumes, more_mounts = _destination_volumes(
        cluster.from_backup, "restore", contract.RESTORE_CREDENTIALS_MOUNT, contract.RESTORE_CA_MOUNT,
        contract.RESTORE_VOLUME_MOUNT)
    return volumes + more_volumes, mounts + more_mounts



def _sidecar_probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": contract.SIDECAR_PORT},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 5,
    }



def pull_policy(image: str) -> str:
    """Kubernetes' own default for `image` (Always for `latest` or no tag, else IfNotPresent),
    written out: OpenKruise defaults an unset policy to Always for its in-place updates, so an
    Advanced StatefulSet's member could not restart while its registry is unreachable, or at all
    on nodes whose images were loaded by hand. Both backends pull the same way."""
    name, digested, _ = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ("" if digested else "latest")
    return "Always" if tag == "latest" else "IfNotPresent"


def sidecar_container(cluster: Cluster) -> dict[str, Any]:
    """A native sidecar: started before the store, stopped after it (Kubernetes >= 1.29)."""
    return {
        "name": SIDECAR_CONTAINER,
        "image": cluster.sidecar.image,
        "imagePullPolicy": pull_policy(cluster.sidecar.image),
        "command": ["raftset-sidecar"],
        "restartPolicy": "Always",
        "env": sidecar_env(cluster),
        "ports": [{"name": "sidecar", "containerPort": contract.SIDECAR_PORT}],
        # The store container starts only once this succeeds, i.e. once the sidecar has
        # joined the member and written the store's startup file. Every second: kubelet starts
        # the store up to one period after the file is written, and a new learner's clock runs
        # (the scale-out benchmark's joins take about 1 s on loopback); 30 min in all.
        "startupProbe": _sidecar_probe("/startup", period=1, failures=1800),
        "livenessProbe": _sidecar_probe("/livez", period=10, failures=3),
        "volumeMounts": _volume_mounts(cluster, contract.SCRATCH_MOUNT if cluster.engine.scratch else None)
                        + backup_volumes(cluster)[1],
        "resources": dict(cluster.sidecar.resources) or {
            "requests": {"cpu": "20m", "memory": "64Mi"},
            "limits": {"memory": "256Mi"},
        },
        "securityContext": _container_security(),
    }



# Requests only (no limits): the scheduler reserves what a small member needs, and a
# member is never throttled or OOM-killed by a guess. spec.podTemplate.resources replaces it.
DEFAULT_STORE_RESOURCES: dict[str, Any] = {"requests": {"cpu": "250m", "memory": "512Mi"}}



def spread(cluster: Cluster) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The default affinity and topology spread: members on different nodes and zones where
    the cluster can (preferred, never required: a small cluster must still schedule)."""
    selector = {"matchLabels": contract.selector_labels(cluster.name)}
    affinity = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}},
    ]}}
    constraints = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector}]
    return affinity, constraints



def store_container(cluster: Cluster) -> dict[str, Any]:
    return {
        "name": cluster.engine.name,
        "image": cluster.image,
        "imagePullPolicy": pull_policy(cluster.image),
        "command": cluster.engine.command(),
        "ports": [
            {"name": "client", "containerPort": contract.CLIENT_PORT},
            {"name": "peer", "containerPort": contract.PEER_PORT},
            {"name": "metrics", "containerPort": contract.METRICS_PORT},
        ],
        "readinessProbe": _sidecar_probe("/readyz", period=5, failures=3),
        "livenessProbe": {
            "tcpSocket": {"port": contract.CLIENT_PORT},
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
        # Runs before the store gets SIGTERM: hand leadership away and, when this pod is
        # scaled away, remove the member, while the store still serves.
        "lifecycle": {"preStop": {"httpGet": {"path": "/leave", "port": contract.SIDECAR_PORT}}},
        "volumeMounts": _volume_mounts(cluster, cluster.engine.scratch.path if cluster.engine.scratch else None),
        "resources": dict(cluster.pod.resources) or DEFAULT_STORE_RESOURCES,
        "securityContext": _container_security(),
        # A store that exits in error leaves its last log lines in the pod's status: the
        # sidecar reads them to tell corrupt data from other failures (raftset.sidecar.pure.replace).
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }



def _container_security() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}



# Where each key of the three cert-manager-shaped Secrets lands, as `engines.TLSFiles.under()`
# names it: the CA once (all three Secrets carry the same ca.crt), then cert and key.
_TLS_ITEMS = {
    certificates.SERVER: ((certificates.KEY_CA, "ca.crt"), (certificates.KEY_CERT, "server.crt"),
                          (certificates.KEY_KEY, "server.key")),
    certificates.PEER: ((certificates.KEY_CERT, "peer.crt"), (certificates.KEY_KEY, "peer.key")),
    certificates.CLIENT: ((certificates.KEY_CERT, "client.crt"), (certificates.KEY_KEY, "client.key")),
}



def tls_volume(cluster: Cluster) -> dict[str, Any]:
    """One projected volume over the server, peer and client Secrets, whoever filled them."""
    return {
        "name": "tls",
        "projected": {
            # Group-readable: fsGroup makes the files the non-root user's group's.
            "defaultMode": 0o440,
            "sources": [
                {"secret": {"name": certificates.secret_name(cluster.name, purpose),
                            "items": [{"key": key, "path": path} for key, path in items]}}
                for purpose, items in _TLS_ITEMS.items()
            ],
        },
    }



def pod_template(cluster: Cluster, tls_revision: str | None = None) -> dict[str, Any]:
    """The one pod template both workload backends run.

    `tls_revision` (from the TLS provider) is written as a pod annotation, so replacing
    the certificates rolls the members one at a time.
    """
    volumes: list[dict[str, Any]] = [{"name": "run", "emptyDir": {}}]
    if cluster.storage.ephemeral:
        volumes.append({"name": "data", "emptyDir": {}})
    if cluster.tls:
        volumes.append(tls_volume(cluster))
    if cluster.engine.scratch is not None:
        volumes.append({"name": "scratch", "emptyDir": {}})
    volumes += backup_volumes(cluster)[0]
    spec: dict[str, Any] = {
        "serviceAccountName": member_service_account(cluster),
        # Service links would inject ETCD_* variables that etcd reads as flags.
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "initContainers": [sidecar_container(cluster)],
        "containers": [store_container(cluster)],
        "volumes": volumes,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "fsGroup": 65532},
    }
    default_affinity, default_constraints = spread(cluster)
    constraints = cluster.pod.topology_spread_constraints
    optional = {
        "affinity": default_affinity if cluster.pod.affinity is None else cluster.pod.affinity,
        "nodeSelector": dict(cluster.pod.node_selector),
        "tolerations": list(cluster.pod.tolerations),
        "topologySpreadConstraints": default_constraints if constraints is None else list(constraints),
        "priorityClassName": cluster.pod.priority_class_name,
    }
    spec.update({k: v for k, v in optional.items() if v})
    annotations = dict(cluster.pod.annotations)
    if cluster.tls and tls_revision:
        annotations[contract.ANNOTATION_TLS_REVISION] = tls_revision
    return {
        "metadata": {
            "labels": {**cluster.pod.labels, **labels(cluster, "member")},
            "annotations": annotations,
        },
        "spec": spec,
    }

