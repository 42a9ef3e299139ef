"""`make run NODES=real`: the demo clusters on three real nodes (tools.devcluster.nodes: kubelet,
containerd and runc in network namespaces), from the images built from the project's Dockerfile,
the operator running as its own Deployment. Not `make run`'s default: docs/devcluster.md says why.

Everything lives in the lab's namespaces: the guide's etcdctl runs inside a member's container
(`kubectl exec`), where the members' DNS names resolve.
"""

from __future__ import annotations

import json
from pathlib import Path

from raftset import contract
from tools.devcluster import demo, nodes, projectimage, xline

REPO = Path(__file__).resolve().parents[2]
OVERLAY = "statefulset"  # make run NODES=real's default: see docs/devcluster.md
OPERATOR_IMAGE = "ghcr.io/raftset/raftset:0.1.0"  # the Deployment's image and the sidecar's default
OPERATOR = ("raftset-system", "raftset-operator")


def install(run: nodes.Lab, overlay: str = OVERLAY, stores: list[Path] | None = None, clusters: str = "default",
            log=print) -> None:
    """The project's images into every node (the store images `stores`; by default etcd's, and Xline's
    when it is built), then the overlay as a user applies it, with OpenKruise's manager first for the
    `kruise` overlay: its operator Deployment runs the image built from the Dockerfile (one replica: two
    cores). `clusters` (made if missing) is the namespace whose clusters may keep TLS `auto`'s Secrets."""
    operator_image, operator_archive = projectimage.ensure_archive()
    if stores is None:
        stores = [projectimage.store_archive()[1], *([projectimage.xline_archive()[1]] if xline.built() else [])]
    for archive in (operator_archive, *stores):
        nodes.import_archive(run, archive)
    for node in run.plan.nodes:
        run.ctr(node, "images", "tag", "--force", operator_image, OPERATOR_IMAGE)
    if overlay == "kruise":
        nodes.start_kruise(run)
    run.kubectl("apply", "--server-side", "-k", str(REPO / "kustomize" / "overlays" / overlay), timeout=120)
    namespace, name = OPERATOR
    run.kubectl("scale", "-n", namespace, f"deployment/{name}", "--replicas=1")
    run.kubectl("rollout", "status", "-n", namespace, f"deployment/{name}", "--timeout=180s", timeout=190)
    deployment = json.loads(run.kubectl("get", "deployment", "-n", namespace, name, "-o", "json").stdout)
    log(f"operator {name} rolled out from {operator_image} (tagged {OPERATOR_IMAGE}), {overlay} overlay")
    run.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": clusters}},
            demo.secrets_binding(deployment, clusters)]}))


def demos() -> list[dict]:
    """The etcd demo, and the Xline one when Xline is built (its build takes about 25 minutes: `make run`
    on kwok nodes builds it in the background, here it is only used when there)."""
    out = [demo.cluster(ephemeral=False)]
    if xline.built():
        out.append(demo.cluster(contract.KIND_XLINE, demo.XLINE_NAME, ephemeral=False))
    return out


SCALE_IN = {  # what the guide's 5 -> 3 does, by overlay (the demo takes the overlay's default kind)
    "statefulset": f"{demo.NAME}-3 and {demo.NAME}-4 go; a leader among them hands off first",
    "kruise": f"two members go; a leader on {demo.NAME}-3 or {demo.NAME}-4 stays, a lower ordinal reserved instead",
}


def guide(run: nodes.Lab, clusters: list[dict], overlay: str = OVERLAY) -> str:
    """What to try, every line runnable as printed (the `real` tier runs them)."""
    members = ",".join(f"http://{contract.pod_name(demo.NAME, o)}.{contract.peer_service_name(demo.NAME)}"
                       f".default.svc:{contract.CLIENT_PORT}" for o in range(3))
    text = f"""
raftset is running on {len(run.plan.nodes)} real nodes (kubelet, containerd, runc in network namespaces;
images built from the project's Dockerfile; operator from the {overlay} overlay).

  export KUBECONFIG={run.kubeconfig}
  kubectl get nodes -L topology.kubernetes.io/zone
  kubectl get etcdc,xc                       # READY 3/3 and the LEADER, from the members' heartbeats
  kubectl get pods -o wide -L raftset.dev/role
  kubectl exec {contract.pod_name(demo.NAME, 0)} -c etcd -- etcdctl --endpoints={members} endpoint status -w table
  kubectl scale etcdc {demo.NAME} --replicas=5
  kubectl scale etcdc {demo.NAME} --replicas=3     # {SCALE_IN[overlay]}
"""
    if len(clusters) == 1:
        text += "\n  # no XlineCluster: Xline is not built (python -m tools.devcluster build xline, about 25 min)\n"
    return text + f"""
logs: {run.workdir / 'logs'} (removed with the lab)   Ctrl-C stops everything.
"""


def run_demo(count: int = 3, overlay: str = OVERLAY) -> int:
    """Until a stop signal: the lab, the install, the demos, the guide."""
    def demo_on(lab: nodes.Lab) -> None:
        install(lab, overlay)
        clusters = demos()
        lab.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": clusters}))
        print(guide(lab, clusters, overlay), flush=True)

    return nodes.serve(count, demo_on)
