"""Pure renderers: a parsed `Cluster` in, Kubernetes manifests (plain dicts) out.

One pod template serves both workload backends; `workload()` adds the StatefulSet
fields both APIs share and lets the `Backend` write the only part that differs (the
scale fields: `replicas`, plus `reserveOrdinals` on OpenKruise).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

from raftset import backups, contract
from raftset.contract import SidecarEnv, quorum
from raftset.operator.pure.scale_step import ScaleStep
from raftset.operator.pure import space
from raftset.operator.pure import certificates
from raftset.operator.pure.spec import Cluster
from raftset.operator.pure.storage import Claims

# Long enough for the preStop leave (MoveLeader + MemberRemove, each bounded by the
# sidecar's own timeouts) and a clean store shutdown.
TERMINATION_GRACE_SECONDS = 60

SIDECAR_CONTAINER = "sidecar"


def labels(cluster: Cluster, component: str) -> dict[str, str]:
    return {
        **contract.selector_labels(cluster.name),
        contract.LABEL_COMPONENT: component,
        contract.LABEL_MANAGED_BY: contract.MANAGER,
        contract.LABEL_PART_OF: contract.MANAGER,
        contract.LABEL_CLUSTER: cluster.name,
        contract.LABEL_ENGINE: cluster.engine.name,
    }


def metadata(cluster: Cluster, name: str, component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": cluster.namespace,
        "labels": labels(cluster, component),
        "ownerReferences": [cluster.owner_reference],
    }


def member_service_account(cluster: Cluster) -> str:
    return f"{cluster.name}-member"


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
    if cluster.backup:
        # Beside the volumes backup_volumes() mounts: the sidecar takes no backup until its pod
        # mounts what spec.backup names now (raftset.backups.unmounted; docs/backups.md).
        plain[SidecarEnv.BACKUP_MOUNTS] = backups.mounts(cluster.backup)
    return [
        {"name": SidecarEnv.POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        *({"name": k, "value": v} for k, v in {**plain, **contract.SIDECAR_PROCESS_ENV}.items()),
    ]


def _volume_mounts(cluster: Cluster) -> list[dict[str, Any]]:
    mounts = [
        {"name": "data", "mountPath": contract.DATA_MOUNT},
        {"name": "run", "mountPath": contract.RUN_MOUNT},
    ]
    if cluster.tls:
        mounts.append({"name": "tls", "mountPath": contract.TLS_MOUNT, "readOnly": True})
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


def sidecar_container(cluster: Cluster) -> dict[str, Any]:
    """A native sidecar: started before the store, stopped after it (Kubernetes >= 1.29)."""
    return {
        "name": SIDECAR_CONTAINER,
        "image": cluster.sidecar.image,
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
        "volumeMounts": _volume_mounts(cluster) + backup_volumes(cluster)[1],
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
        "volumeMounts": _volume_mounts(cluster),
        "resources": dict(cluster.pod.resources) or DEFAULT_STORE_RESOURCES,
        "securityContext": _container_security(),
        # A store that exits in error leaves its last log lines in the pod's status: the
        # sidecar reads them to tell corrupt data from other failures (raftset.sidecar.repair).
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


def _volume_claim_templates(cluster: Cluster, claims: Claims | None) -> list[dict[str, Any]]:
    if cluster.storage.ephemeral:
        return []
    # Immutable once the workload exists: it keeps the size it was created with, and
    # expansion patches the PVCs (raftset.operator.pure.storage).
    size = claims.template_size if claims else cluster.storage.size
    claim: dict[str, Any] = {
        "metadata": {"name": "data", "labels": labels(cluster, "member")},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
        },
    }
    if cluster.storage.storage_class:
        claim["spec"]["storageClassName"] = cluster.storage.storage_class
    return [claim]


def workload(cluster: Cluster, replicas: int, reserved: Iterable[int] = (), *,
             tls_revision: str | None = None, claims: Claims | None = None,
             scale_step: ScaleStep | None = None) -> dict[str, Any]:
    """The StatefulSet (builtin or Advanced) running `replicas` pods around the `reserved` ordinals.

    `claims` (from the live workload, see raftset.operator.pure.storage) keeps the claim
    template as created and records how far the PVCs were expanded. `scale_step` is the
    step Raft has yet to confirm: written in the same apply as the step, so the record and
    the step never part.
    """
    backend = cluster.backend
    meta = metadata(cluster, cluster.name, "member")
    annotations: dict[str, str] = {}
    if claims is not None and not cluster.storage.ephemeral:
        annotations.update(claims.annotations())
    if scale_step is not None:
        annotations[contract.ANNOTATION_SCALE_STEP] = scale_step.to_json()
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": backend.api_version,
        "kind": backend.kind,
        "metadata": meta,
        "spec": {
            "serviceName": contract.peer_service_name(cluster.name),
            "selector": {"matchLabels": contract.selector_labels(cluster.name)},
            # Members join one at a time through the sidecar, not through pod ordering;
            # Parallel lets a restarted pod come back without waiting for its elders.
            "podManagementPolicy": "Parallel",
            # The operator restarts one member at a time, followers first and the leader
            # last (raftset.operator.pure.rolls); a controller-driven roll would take the
            # highest ordinal first, leader or not.
            "updateStrategy": {"type": "OnDelete"},
            "persistentVolumeClaimRetentionPolicy": {
                "whenScaled": cluster.storage.when_scaled,
                "whenDeleted": cluster.storage.when_deleted,
            },
            "template": pod_template(cluster, tls_revision),
            "volumeClaimTemplates": _volume_claim_templates(cluster, claims),
            **backend.scale_spec(replicas, reserved),
        },
    }


def _service(cluster: Cluster, name: str, component: str, ports: dict[str, int],
             **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(cluster, name, component),
        "spec": {
            **spec,
            "selector": contract.selector_labels(cluster.name),
            "ports": [{"name": port, "port": number, "targetPort": number} for port, number in ports.items()],
        },
    }


def peer_service(cluster: Cluster) -> dict[str, Any]:
    """Headless: every pod gets a stable DNS name, its peer URL."""
    return _service(cluster, contract.peer_service_name(cluster.name), "peer",
                    {"peer": contract.PEER_PORT, "client": contract.CLIENT_PORT},
                    clusterIP="None",
                    # Peers must resolve each other before they are ready, or no member ever is.
                    publishNotReadyAddresses=True)


def metrics_service(cluster: Cluster) -> dict[str, Any]:
    """Both /metrics of every member, the store's own and the sidecar's, for a ServiceMonitor.

    Headless and not waiting for readiness: a member that is not ready is what one wants to see.
    """
    service = _service(cluster, contract.metrics_service_name(cluster.name), "metrics",
                       {"metrics": contract.METRICS_PORT, "sidecar": contract.SIDECAR_PORT},
                       clusterIP="None", publishNotReadyAddresses=True)
    service["metadata"]["labels"][contract.LABEL_METRICS] = "true"
    return service


def client_service(cluster: Cluster) -> dict[str, Any]:
    return _service(cluster, contract.client_service_name(cluster.name), "client",
                    {"client": contract.CLIENT_PORT}, type="ClusterIP")


def pod_disruption_budget(cluster: Cluster, current_voters: int) -> dict[str, Any] | None:
    """Voluntary evictions may never take the cluster below quorum, of the desired size or of
    the membership as it is now, whichever is larger: in the middle of a 5 -> 3 scale-in Raft
    still counts 5 voters, and 3 of them must stay."""
    if not cluster.pdb_enabled:
        return None
    min_available = cluster.pdb_min_available
    if min_available is None:
        min_available = quorum(max(cluster.replicas, current_voters))
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(cluster, cluster.name, "member"),
        "spec": {
            "minAvailable": min_available,
            "selector": {"matchLabels": contract.selector_labels(cluster.name)},
        },
    }


def member_rbac(cluster: Cluster, ordinals: int = 0) -> list[dict[str, Any]]:
    """What a member's sidecar may do, by name wherever RBAC can say it.

    Its heartbeat Lease and, when it leads, the cluster's membership Lease (server-side apply that creates an object is authorized as
    `create` of that name, so `resourceNames` bounds it; a plain POST has no name and is
    refused), its pod's role label, a read of its workload, and a list of the cluster's
    Leases for membership-clean.
    The names cover ordinals 0..max(contract.NAMED_ORDINALS, `ordinals`)-1 so that a pod being
    scaled away keeps its rights while it leaves. RBAC cannot tell one member of a cluster
    from another: docs/security.md says what that leaves open.
    """
    sa = member_service_account(cluster)
    backend = cluster.backend
    pods = [contract.pod_name(cluster.name, o) for o in range(max(contract.NAMED_ORDINALS, ordinals))]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(cluster, sa, "member"),
        "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": [contract.lease_name(p) for p in pods]
             + [contract.membership_lease_name(cluster.name), contract.backup_lease_name(cluster.name),
                contract.restore_lease_name(cluster.name)],
             "verbs": ["get", "create", "update", "patch", "delete"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]},
            # The leader's sidecar narrates compaction, defragmentation and alarms.
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["pods"], "resourceNames": pods, "verbs": ["get", "patch"]},
            {"apiGroups": [backend.group], "resources": [backend.plural],
             "resourceNames": [cluster.name], "verbs": ["get"]},
            # spec.backup and spec.bootstrap are read there. Read only: a member that could patch
            # its cluster object could change its spec (image, replicas, options) for every member;
            # the operator moves a backup-now request to the backup Lease (docs/security.md).
            {"apiGroups": [contract.GROUP], "resources": [cluster.engine.plural],
             "resourceNames": [cluster.name], "verbs": ["get"]},
        ],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(cluster, sa, "member")},
        role,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(cluster, sa, "member"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": cluster.namespace}],
        },
    ]


def backup_request_lease(cluster: Cluster, request: str) -> dict[str, Any]:
    """The backup Lease with only the operator's field: the on-demand request id the leader's
    sidecar serves (server-side apply keeps the record the sidecar owns on the same Lease)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": contract.backup_lease_name(cluster.name),
            "namespace": cluster.namespace,
            "labels": {**contract.selector_labels(cluster.name), contract.LABEL_BACKUP: "true"},
            "annotations": {contract.ANNOTATION_BACKUP_REQUEST: request},
            "ownerReferences": [cluster.owner_reference],
        },
    }


def edited_behind_our_back(event_type: str | None, obj: Mapping[str, Any]) -> bool:
    """Does this watch event of an owned object mean someone else changed it?

    A spec edit bumps generation ahead of the controller's observedGeneration; status
    churn does not. A Service has no generation and no controller writing it: any
    change to it is someone's edit.
    """
    if event_type == "DELETED":
        return True
    if event_type != "MODIFIED":
        return False
    generation = (obj.get("metadata") or {}).get("generation")
    return generation is None or generation != (obj.get("status") or {}).get("observedGeneration")


def cached(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A private copy of an owned object for an index, without `metadata.managedFields`: nothing
    here reads them, and they repeat the path of every field, for each of its writers."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return copy.deepcopy({**obj, "metadata": meta})
