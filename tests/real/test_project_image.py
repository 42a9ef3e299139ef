"""The project's image, built by buildah from the project's Dockerfile on local bases
(tools/devcluster/projectimage.py), runs on a real node as the operator renders its sidecar:
uid 65532, non-root, every capability dropped."""

from __future__ import annotations

import json
import time

import pytest

from tools.devcluster import nodes, projectimage

pytestmark = pytest.mark.real

# What the Dockerfile promises: both entry points on PATH from the venv, the restore tools, the
# user, the working directory and the environment.
PROBE = """
id -u; id -g; pwd
for c in raftset-operator raftset-sidecar python; do command -v "$c"; done
echo "$PYTHONUNBUFFERED $PYTHONDONTWRITEBYTECODE"
python -c 'import sys, raftset.operator.__main__, raftset.sidecar.__main__; print(sys.version_info[:2])'
etcdutl version | head -1
xlineutl --version
"""


def test_the_image_from_the_dockerfile_runs_its_entry_points_as_the_non_root_user() -> None:
    name, archive = projectimage.ensure_archive()
    with nodes.start(1, dns=False) as run:
        nodes.import_archive(run, archive)
        assert name in run.ctr(run.plan.nodes[0], "images", "list", "-q").split()
        pod = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "image", "namespace": "default"},
            "spec": {"automountServiceAccountToken": False, "restartPolicy": "Never",
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "fsGroup": 65532},
                     "containers": [{"name": "main", "image": name, "imagePullPolicy": "Never",
                                     "command": ["sh", "-ec", PROBE],
                                     "securityContext": {"allowPrivilegeEscalation": False,
                                                         "capabilities": {"drop": ["ALL"]}}}]},
        }
        run.kubectl("apply", "-f", "-", input=json.dumps(pod))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            phase = json.loads(run.kubectl("get", "pod", "image", "-o", "json").stdout)["status"].get("phase")
            if phase in ("Succeeded", "Failed"):
                break
            time.sleep(1)
        logs = run.kubectl("logs", "image").stdout.splitlines()
        assert phase == "Succeeded", (phase, logs, run.kubectl("describe", "pod", "image").stdout)
    assert logs[:3] == ["65532", "65532", "/tmp"]
    assert logs[3:6] == ["/opt/raftset/bin/raftset-operator", "/opt/raftset/bin/raftset-sidecar",
                         "/opt/raftset/bin/python"]
    assert logs[6:8] == ["1 1", "(3, 11)"]
    assert logs[8].startswith("etcdutl version: 3.7.3"), logs
    assert "xlineutl" in logs[9], logs
