"""The pod runner mounts the sidecar's backup claim as kubelet would: from the volume bound to the
claim (the rule of the `data` claim), never before it is bound; and its Secrets' files."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from raftset import contract
from raftset.operator.pure.pod_template import pod_template
from raftset.operator.pure import spec
from tests.harness.operator import api, kubectl
from tools.devcluster.podrunner import PodRunner

pytestmark = pytest.mark.k8s


def test_the_backup_claim_is_its_bound_volume_and_the_secrets_are_files(kube_apiserver: Any,
                                                                        tmp_path: Path) -> None:
    namespace = f"mnt-{uuid.uuid4().hex[:6]}"
    kubectl(kube_apiserver.kubeconfig, "create", "namespace", namespace)
    s3 = {"bucket": "b", "endpoint": "https://s3.example", "credentialsSecret": "s3-credentials"}
    body = {"apiVersion": contract.API_VERSION, "kind": contract.KIND_ETCD,
            "metadata": {"name": "kv", "namespace": namespace},
            "spec": {"replicas": 1, "backup": {"pvc": {"claimName": "backups"}},
                     "bootstrap": {"fromBackup": {"backup": "latest", "s3": s3}}}}
    template = pod_template(spec.parse(body, default_workload_kind="StatefulSet"))
    pod = {"metadata": {**template["metadata"], "name": "kv-0", "namespace": namespace}, "spec": template["spec"]}
    core = client.CoreV1Api(api(kube_apiserver.kubeconfig))
    core.create_namespaced_secret(namespace, {"metadata": {"name": "s3-credentials"}, "data": {
        contract.ACCESS_KEY_FILE: base64.b64encode(b"AK").decode(),
        contract.SECRET_KEY_FILE: base64.b64encode(b"SK").decode(), "other": base64.b64encode(b"x").decode()}})
    # What the PersistentVolume controller would bind it to (this tier runs none).
    volume_dir = tmp_path / "pv"
    volume_dir.mkdir()
    pv = f"pv-{namespace}"
    core.create_persistent_volume({"metadata": {"name": pv}, "spec": {
        "accessModes": ["ReadWriteMany"], "capacity": {"storage": "1Gi"}, "storageClassName": "",
        "hostPath": {"path": str(volume_dir)}, "claimRef": {"namespace": namespace, "name": "backups"}}})
    core.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": "backups"}, "spec": {
        "accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv,
        "resources": {"requests": {"storage": "1Gi"}}}})

    runner = PodRunner(kube_apiserver.kubeconfig, tmp_path / "runner", namespace=namespace)
    try:
        with pytest.raises(RuntimeError, match="claim backups is Pending, not Bound"):
            runner._sidecar_volumes(pod, tmp_path / "early")
        core.patch_namespaced_persistent_volume_claim_status("backups", namespace, {"status": {"phase": "Bound"}})
        for root in (tmp_path / "mounts-0", tmp_path / "mounts-1"):  # two pods of the cluster
            assert runner._sidecar_volumes(pod, root)
            assert (root / contract.BACKUP_VOLUME_MOUNT.lstrip("/")).resolve() == volume_dir.resolve()
            credentials = root / contract.RESTORE_CREDENTIALS_MOUNT.lstrip("/")
            assert sorted(p.name for p in credentials.iterdir()) == sorted(
                [contract.ACCESS_KEY_FILE, contract.SECRET_KEY_FILE]), "only the volume's items"
            assert (credentials / contract.ACCESS_KEY_FILE).read_bytes() == b"AK"
        (tmp_path / "mounts-0" / contract.BACKUP_VOLUME_MOUNT.lstrip("/") / "snapshot").write_text("s")
        assert (tmp_path / "mounts-1" / contract.BACKUP_VOLUME_MOUNT.lstrip("/") / "snapshot").read_text() == "s"
    finally:
        runner.close()
        core.delete_persistent_volume(pv)
