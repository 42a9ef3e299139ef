"""An overlay installed exactly as docs/install.md says, and its operator run with only that overlay's rights.

`kubectl apply --server-side -k kustomize/overlays/<overlay>` installs everything, the Deployment
included. Its image does not run here, so the Deployment's operator container runs as a local
process the way `make run` runs it (`tools.devcluster.operatorpod`): its command, args and env
from the rendered Deployment, and a TokenRequest token of its ServiceAccount as credentials, so
the overlay's ClusterRole is all it may do. The pod's restart count is `OperatorPod.restarts`.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from raftset import contract
from raftset.workloads import ADVANCED_STATEFULSET
from tests.harness.operator import kubectl
from tools.devcluster import operatorpod

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ("statefulset", "kruise")
# kopf's retries of a failed watch, shortened (RAFTSET_API_ERROR_BACKOFFS; its default gives up
# after 1+1+2+3+5+8+13+21 s): an operator that would give up on a forbidden watch, and exit,
# does so 4 s after it started watching.
BACKOFFS = (1, 1, 2)
# An operator still up this long after it started did not give up on any watch.
ESCALATION_S = sum(BACKOFFS) + 15
KRUISE_CRD = f"{ADVANCED_STATEFULSET.plural}.{ADVANCED_STATEFULSET.group}"


def rendered_deployment(overlay: str) -> dict[str, Any]:
    rendered = subprocess.run(["kubectl", "kustomize", str(ROOT / "kustomize" / "overlays" / overlay)],
                              capture_output=True, text=True, check=True, timeout=60).stdout
    return next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment")


def apply_overlay(admin: str, overlay: str) -> None:
    """The documented install: `kubectl apply --server-side -k kustomize/overlays/<overlay>`."""
    kubectl(admin, "apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "kustomize" / "overlays" / overlay))
    for plural in (contract.PLURAL_ETCD, contract.PLURAL_XLINE):
        kubectl(admin, "wait", "--for=condition=Established", f"crd/{plural}.{contract.GROUP}", "--timeout=60s")


@contextmanager
def installed_operator(admin: str, overlay: str, host: str, workdir: Path,
                       **env: str) -> Iterator[operatorpod.OperatorPod]:
    """`overlay` applied and its operator running as its ServiceAccount until the block ends (`env`
    overrides the container's, as an admin editing the Deployment would); the Deployment goes
    again afterwards (on a full plane its pods would be kwok's, running nothing)."""
    apply_overlay(admin, overlay)
    deployment = rendered_deployment(overlay)
    pod = started_operator(admin, deployment, host, workdir, **env)
    try:
        yield pod
    finally:
        pod.close()
        kubectl(admin, "delete", "deployment", deployment["metadata"]["name"], "-n", pod.spec.namespace,
                "--ignore-not-found", check=False)


def started_operator(admin: str, deployment: dict[str, Any], host: str, workdir: Path,
                     **env: str) -> operatorpod.OperatorPod:
    """The operator container of `deployment` running as a local process with a token of its ServiceAccount."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec = operatorpod.installed(operatorpod.container_spec(
        deployment, host=host, ports=operatorpod.free_ports(deployment, host), bin_dir=Path(sys.executable).parent))
    spec = dataclasses.replace(spec, env={**spec.env, "RAFTSET_API_ERROR_BACKOFFS": ",".join(map(str, BACKOFFS)), **env})
    identity = operatorpod.service_account_kubeconfig(admin, spec.namespace, spec.service_account,
                                                      workdir / "operator.kubeconfig")
    return operatorpod.OperatorPod(spec, identity, workdir).start()


def kruise_crd(crds: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenKruise's Advanced StatefulSet CRD among its CRDs (tools.devcluster.plane.kruise_manifests)."""
    return next(c for c in crds if c["metadata"]["name"] == KRUISE_CRD)


def assert_never_exited(pod: operatorpod.OperatorPod, since: float) -> None:
    """Still the first process, with the shortened retries in force, and up for longer than kopf
    then takes to give up on a forbidden watch."""
    time.sleep(max(0.0, since + ESCALATION_S - time.monotonic()))
    said = f"API errors retried after {', '.join(map(str, BACKOFFS))} s, then given up"
    log = pod.log.read_text()
    assert said in log, f"the operator does not say {said!r}, so the window proves nothing:\n{log[-3000:]}"
    assert pod.restarts == 0 and pod.proc is not None and pod.proc.alive(), \
        f"the operator exited ({pod.restarts} restarts):\n" + log[-3000:]
