"""Start a local control plane on loopback and tear it down again.

`start(full=False)` runs etcd + kube-apiserver (enough for the `k8s` tier);
`start(full=True)` adds kube-controller-manager, kube-scheduler, the OpenKruise manager
(with its webhooks served on loopback) and kwok with fake nodes (the `e2e` tier, `make run`).
Every server binds to one 127.a.b.1 address of the plane's own loopback block.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from raftset import contract
from tools.devcluster import build, certmanager, kubeconfig, net, pki, procs

KUBECTL = "kubectl"
KRUISE_NAMESPACE = "kruise-system"
KRUISE_WEBHOOK_HOST = "127.0.0.1"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
CERT_MANAGER_PROC = "cert-manager-controller"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
# kube-controller-manager's own dynamic provisioner (--enable-hostpath-provisioner): it makes
# each volume a directory under this fixed path (Go's "/tmp/hostpath_pv/<uid>", not
# $TMPDIR) and removes it when its PersistentVolume is released (reclaim policy Delete).
HOSTPATH_PROVISIONER = "kubernetes.io/host-path"
HOSTPATH_ROOT = Path("/tmp/hostpath_pv")
STORAGE_CLASS = "standard"
START_TIMEOUT_S = 120.0

Log = Callable[[str], None]


class Admin(Protocol):
    """What starting a controller beside an apiserver needs, as its admin from the host: this
    module's Plane, or the real-node lab (tools.devcluster.nodes.Lab)."""

    kubeconfig: str
    workdir: Path
    supervisor: procs.Supervisor

    @property
    def host(self) -> str:
        """The loopback address its host-side servers (metrics, health) bind to."""

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = ...) -> subprocess.CompletedProcess[str]: ...


def apply(admin: Admin, manifest: str | dict | Sequence[dict], server_side: bool = True) -> None:
    """Apply objects as the admin; server-side because Kruise's CRDs exceed the
    client-side last-applied annotation limit."""
    if not isinstance(manifest, str):
        docs = [manifest] if isinstance(manifest, dict) else list(manifest)
        manifest = yaml.safe_dump_all(docs, sort_keys=False)
    args = ["apply", "-f", "-"] + (["--server-side", "--force-conflicts"] if server_side else [])
    admin.kubectl(*args, input=manifest)


def _quiet(_: str) -> None:
    pass


@dataclass
class Plane:
    """A running control plane. `kubeconfig` is cluster-admin (group system:masters)."""

    workdir: Path
    block: net.Block
    certs: pki.Pki
    url: str
    kubeconfig: str  # a str, so it drops into os.environ, subprocess argv and client libraries alike
    full: bool
    supervisor: procs.Supervisor
    timings: dict[str, float] = field(default_factory=dict)
    _owns_workdir: bool = False
    claims: net.Claims | None = None  # a block bigger than a /20 keeps its /20s from other planes

    @property
    def host(self) -> str:
        return self.block.host

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, as_kubeconfig: str | None = None,
                timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """kubectl as the admin, or with another kubeconfig (e.g. from `token_kubeconfig`)."""
        cmd = [KUBECTL, "--kubeconfig", as_kubeconfig or self.kubeconfig, *args]
        result = subprocess.run(cmd, input=input, text=True, capture_output=True, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
        return result

    def apply(self, manifest: str | dict | Sequence[dict], server_side: bool = True) -> None:
        apply(self, manifest, server_side)

    def token(self, namespace: str, service_account: str, duration: str = "1h") -> str:
        """A bound token from the TokenRequest API (needs only the apiserver)."""
        return self.kubectl("create", "token", service_account, "-n", namespace, f"--duration={duration}").stdout.strip()

    def token_kubeconfig(self, namespace: str, service_account: str, path: Path | None = None) -> str:
        """A kubeconfig that authenticates as system:serviceaccount:<namespace>:<service_account>."""
        path = path or self.workdir / f"sa-{namespace}-{service_account}.kubeconfig"
        return self.kubeconfig_for_token(self.token(namespace, service_account), path)

    def kubeconfig_for_token(self, token: str, path: Path) -> str:
        user = kubeconfig.token_user(token)
        return str(kubeconfig.write(path, kubeconfig.render(self.url, self.certs.ca.cert, user)))

    def dead(self) -> list[str]:
        return [p.name for p in self.supervisor.dead()]

    def provisioned_dirs(self) -> list[Path]:
        """The directories the hostpath provisioner made for this plane's PersistentVolumes (none when
        the apiserver no longer answers: the directory names are PV uids only it knows)."""
        if not self.full:
            return []
        result = self.kubectl("get", "persistentvolumes", "-o", "json", check=False, timeout=10)
        if result.returncode != 0:
            return []
        paths = [Path(((pv.get("spec") or {}).get("hostPath") or {}).get("path") or "/")
                 for pv in json.loads(result.stdout)["items"]]
        return [path for path in paths if path.parent == HOSTPATH_ROOT]

    def stop(self) -> None:
        volumes = self.provisioned_dirs()  # read while the apiserver still answers
        self.supervisor.stop_all()
        if self.claims is not None:
            self.claims.close()
        for volume in volumes:
            shutil.rmtree(volume, ignore_errors=True)
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Plane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# No proxy handler: urllib would send even loopback requests to an HTTP(S)_PROXY from the
# environment (Go's clients never proxy loopback addresses; Python's do unless NO_PROXY says so).
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str, context: ssl.SSLContext | None = None, timeout: float = 3.0) -> tuple[int, str]:
    handlers = [urllib.request.HTTPSHandler(context=context)] if context else []
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), *handlers) if handlers else _DIRECT
    with opener.open(url, timeout=timeout) as resp:
        return resp.status, resp.read().decode(errors="replace")


def _ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    status, body = _get(url, context)
    return status == 200 and body.strip().startswith(("ok", "{"))


def _admin_context(certs: pki.Pki) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs.ca.cert))
    ctx.load_cert_chain(str(certs.admin.cert), str(certs.admin.key))
    return ctx


def _self_signed_context() -> ssl.SSLContext:
    """For health probes of components that serve their own self-signed loopback cert."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _start_etcd(sup: procs.Supervisor, workdir: Path, host: str) -> tuple[str, procs.Proc]:
    client, peer = net.free_port(host), net.free_port(host)
    client_url, peer_url = f"http://{host}:{client}", f"http://{host}:{peer}"
    proc = sup.start(
        "etcd",
        [
            str(build.ETCD.binary("etcd")),
            "--name=devcluster",
            f"--data-dir={workdir / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=devcluster={peer_url}",
            "--initial-cluster-state=new",
            "--log-level=warn",
        ],
        env=_base_env(),
    )
    procs.wait_for(lambda: json.loads(_get(f"{client_url}/health")[1]).get("health") == "true",
                   "etcd /health", 30, [proc])
    return client_url, proc


def _start_apiserver(sup: procs.Supervisor, workdir: Path, block: net.Block, certs: pki.Pki, etcd_url: str) -> tuple[str, procs.Proc]:
    port = net.free_port(block.host)
    binary = build.KUBE.binary("kube-apiserver")
    proc = sup.start(
        "kube-apiserver",
        [
            str(binary),
            f"--bind-address={block.host}",
            f"--advertise-address={block.host}",
            f"--secure-port={port}",
            f"--etcd-servers={etcd_url}",
            f"--service-cluster-ip-range={block.service_cidr}",
            # The `kubernetes` Service's Endpoints would hold a loopback address, which
            # Endpoints validation refuses; nothing in this plane needs that Service.
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={certs.apiserver.cert}",
            f"--tls-private-key-file={certs.apiserver.key}",
            f"--client-ca-file={certs.ca.cert}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={certs.sa_public}",
            f"--service-account-signing-key-file={certs.sa_private}",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            "--profiling=false",
            f"--cert-dir={workdir / 'apiserver'}",
        ],
        env=_base_env(),
    )
    url = f"https://{block.host}:{port}"
    ctx = _admin_context(certs)
    procs.wait_for(lambda: _ok(f"{url}/readyz", ctx), "kube-apiserver /readyz", START_TIMEOUT_S, [proc])
    return url, proc


def _start_kube_component(sup: procs.Supervisor, plane: Plane, name: str, *flags: str) -> procs.Proc:
    """controller-manager or scheduler: authenticated by the admin kubeconfig, healthy on /healthz."""
    port = net.free_port(plane.host)
    proc = sup.start(
        name,
        [
            str(build.KUBE.binary(name)),
            f"--kubeconfig={plane.kubeconfig}",
            f"--authentication-kubeconfig={plane.kubeconfig}",
            f"--authorization-kubeconfig={plane.kubeconfig}",
            "--leader-elect=false",
            f"--bind-address={plane.host}",
            f"--secure-port={port}",
            f"--cert-dir={plane.workdir / name}",
            "--profiling=false",
            *flags,
        ],
        env=_base_env(),
    )
    procs.wait_for(lambda: _ok(f"https://{plane.host}:{port}/healthz", _self_signed_context()),
                   f"{name} /healthz", START_TIMEOUT_S, [proc])
    return proc


def _start_controller_manager(sup: procs.Supervisor, plane: Plane) -> procs.Proc:
    return _start_kube_component(
        sup, plane, "kube-controller-manager",
        f"--service-account-private-key-file={plane.certs.sa_private}",
        f"--root-ca-file={plane.certs.ca.cert}",
        f"--cluster-signing-cert-file={plane.certs.ca.cert}",
        f"--cluster-signing-key-file={plane.certs.ca.key}",
        "--enable-hostpath-provisioner",
    )


def storage_class() -> dict:
    """The default StorageClass: claims without a class get a hostPath volume made at once."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS,
                     "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": HOSTPATH_PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }


def _start_scheduler(sup: procs.Supervisor, plane: Plane) -> procs.Proc:
    return _start_kube_component(sup, plane, "kube-scheduler")


def kruise_source() -> Path:
    """Kruise's source tree in the Go module cache: CRDs and webhook manifests come from it."""
    return build.module_source(build.KRUISE, "github.com/openkruise/kruise")


def _kustomize(admin: Admin, path: Path) -> list[dict]:
    rendered = admin.kubectl("kustomize", str(path)).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def kruise_manifests(admin: Admin) -> tuple[list[dict], list[dict]]:
    """Kruise's CRDs and its two webhook configurations, as its own kustomize renders them
    (with the `kruise-` name prefix of its default overlay). The manager then rewrites the
    webhook client configs to its WEBHOOK_HOST URL and fills in its CA."""
    source = kruise_source()
    crds = _kustomize(admin, source / "config" / "crd")
    webhooks = []
    for doc in _kustomize(admin, source / "config" / "webhook"):
        if doc["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            doc["metadata"]["name"] = "kruise-" + doc["metadata"]["name"]
            webhooks.append(doc)
    return crds, webhooks


def _webhooks_use_url(admin: Admin, expected_prefix: str) -> bool:
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        prefix = "kruise-mutating" if kind.startswith("mutating") else "kruise-validating"
        obj = json.loads(admin.kubectl("get", kind, f"{prefix}-webhook-configuration", "-o", "json").stdout)
        hooks = obj.get("webhooks") or []
        if not hooks or not all(h["clientConfig"].get("url", "").startswith(expected_prefix) for h in hooks):
            return False
    return True


def start_kruise(admin: Admin, beside: Callable[[list[str]], list[str]] = list,
                 kubeconfig: str | None = None, probe: bool = True) -> procs.Proc:
    """OpenKruise's CRDs, webhooks and manager, out of cluster as the admin (part of a full plane's
    `start`; the real-node lab starts it for Advanced StatefulSets). The apiserver calls its webhooks
    on 127.0.0.1: `beside` runs it where that is the apiserver's loopback (the lab's plane node),
    with `kubeconfig` to reach the apiserver from there; only a manager on the host's loopback can be
    probed from here (`probe`), one beside a lab's apiserver is known up once it rewrote the webhooks."""
    crds, webhooks = kruise_manifests(admin)
    apply(admin, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KRUISE_NAMESPACE}})
    apply(admin, crds)
    admin.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", *[c["metadata"]["name"] for c in crds])
    apply(admin, webhooks)
    metrics_port, health_port = net.free_port(admin.host), net.free_port(admin.host)
    # Kruise's own readiness check dials https://localhost:<port>, so its webhook server
    # must listen on 127.0.0.1 (the port is still picked freshly, so planes don't collide).
    webhook_port = net.free_port(KRUISE_WEBHOOK_HOST)
    cert_dir = admin.workdir / "kruise-webhook-certs"
    env = {
        **_base_env(),
        "KUBECONFIG": kubeconfig or admin.kubeconfig,
        "POD_NAMESPACE": KRUISE_NAMESPACE,
        # WEBHOOK_HOST mode: certificates on disk for this IP, webhooks called by URL.
        "WEBHOOK_HOST": KRUISE_WEBHOOK_HOST,
        "WEBHOOK_PORT": str(webhook_port),
        "WEBHOOK_CERT_DIR": str(cert_dir),
    }
    proc = admin.supervisor.start(
        "kruise-manager",
        beside([
            str(build.KRUISE.binary("kruise")),
            f"--metrics-addr={admin.host}:{metrics_port}",
            f"--health-probe-addr={admin.host}:{health_port}",
            "--enable-leader-election=false",
            "--enable-pprof=false",
        ]),
        env=env,
    )
    if probe:
        procs.wait_for(lambda: _ok(f"http://{admin.host}:{health_port}/readyz"), "kruise-manager /readyz",
                       START_TIMEOUT_S, [proc])
    procs.wait_for(lambda: _webhooks_use_url(admin, f"https://{KRUISE_WEBHOOK_HOST}:{webhook_port}/"),
                   "kruise webhook configurations pointing at the manager", START_TIMEOUT_S, [proc])
    return proc


def start_cert_manager(admin: Admin) -> procs.Proc:
    """cert-manager's real CRDs and its controller, out of cluster as the admin.

    Not part of `start`: a test of what the operator does without cert-manager needs a
    plane that does not serve it yet. The CA and SelfSigned issuers need neither the
    webhook nor the cainjector, so only the controller runs (the source snapshot's
    build, tools.devcluster.certmanager); it talks to the API only, and its servers bind to
    `admin.host`. Calling it again returns the running controller.
    """
    running = [p for p in admin.supervisor.procs if p.name == CERT_MANAGER_PROC and p.alive()]
    if running:
        return running[0]
    certmanager.ensure(log=_quiet)
    crds = [doc for path in sorted(certmanager.CERT_MANAGER.crds_dir.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]
    apply(admin, crds)
    admin.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", *[c["metadata"]["name"] for c in crds])
    health = net.free_port(admin.host)
    proc = admin.supervisor.start(
        CERT_MANAGER_PROC,
        [
            str(certmanager.CERT_MANAGER.binary()),
            f"--kubeconfig={admin.kubeconfig}",
            "--leader-elect=false",
            f"--metrics-listen-address={admin.host}:{net.free_port(admin.host)}",
            f"--internal-healthz-listen-address={admin.host}:{health}",
            "--v=2",
        ],
        env=_base_env(),
    )
    procs.wait_for(lambda: _ok(f"http://{admin.host}:{health}/livez"), "cert-manager-controller /livez",
                   START_TIMEOUT_S, [proc])
    return proc


NODE_PODS = 110  # a fake node's pods by default (the kubelet's default): 32 CPUs hold 118 member pods


def node_scale(pods: int, nodes: int) -> int:
    """How many default nodes' worth of capacity each fake node gets so that `nodes` hold `pods`:
    a member pod requests 270m CPU and 576Mi, so 4 default nodes hold 440 and the rest would stay
    Pending (an operator cost measured on clusters that never become ready)."""
    return max(1, math.ceil(pods / (nodes * NODE_PODS)))


def fake_node(name: str, scale: int = 1) -> dict:
    """A Node that kwok keeps Ready; no taints, so ordinary pods schedule onto it; `scale` times
    the default capacity."""
    capacity = {"cpu": str(32 * scale), "memory": f"{256 * scale}Gi", "pods": str(NODE_PODS * scale)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"},
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def _nodes_ready(plane: Plane, names: list[str]) -> bool:
    nodes = json.loads(plane.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    ready = {
        n["metadata"]["name"]
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
    }
    return set(names) <= ready


def run_pods(namespace_prefix: str) -> str:
    """A jq predicate (kwok's selector keys are jq) true for the pods a pod runner runs: raftset's
    member pods in the namespaces whose name starts with `namespace_prefix` ("": every one)."""
    return (f'(.metadata.labels["{contract.LABEL_MANAGED_BY}"] == "{contract.MANAGER}" '
            f'and .metadata.labels["{contract.LABEL_COMPONENT}"] == "member" '
            f'and (.metadata.namespace | startswith("{namespace_prefix}")))')


# In kwok's fast pod-ready template (as parsed: the block's indentation stripped): what marks
# the pod and its main containers ready.
_READY_TEXT = {'status: "True"\n  type: Ready\n': 'status: "False"\n  type: Ready\n',
               'status: "True"\n  type: ContainersReady\n': 'status: "False"\n  type: ContainersReady\n',
               "ready: true\n  restartCount: 0\n  state:\n    running:":
               "ready: false\n  restartCount: 0\n  state:\n    running:"}


def unready(stage: dict) -> dict:
    """kwok's pod-ready stage turned into one that runs the pod but leaves it not Ready (the main
    containers not ready): its readiness is the pod runner's, from the declared probes."""
    template = stage["spec"]["next"]["statusTemplate"]
    for ready, not_ready in _READY_TEXT.items():
        if ready not in template:
            raise ValueError(f"kwok's pod-ready template changed: {ready!r} not found")
        template = template.replace(ready, not_ready)
    return {**stage, "metadata": {"name": "pod-running-unready"},
            "spec": {**stage["spec"], "next": {**stage["spec"]["next"], "statusTemplate": template}}}


def kwok_pod_stages(run_namespace_prefix: str) -> list[dict]:
    """kwok's default ("fast") pod stages, except that:
    - a terminating pod is deleted only once its finalizers are gone: kwok's own stage strips
      them, which no kubelet does, and the pod runner (tools.devcluster.podrunner) holds a pod
      by a finalizer through its termination;
    - kwok never deletes a pod a pod runner runs: the runner deletes it once its processes have
      stopped, as kubelet does (kwok's own deletes carry the pod's UID as a precondition, as
      kubelet's do: build.KWOK);
    - the pods a pod runner runs (`run_pods`) run but are not made Ready: the runner's probes
      make them Ready, as kubelet's do. Every other pod (those of the e2e tier's stand-in
      sidecars, tests/harness/sidecars.py, whose members do not run) is Ready at once."""
    fast = build.module_source(build.KWOK, "sigs.k8s.io/kwok") / "kustomize" / "stage" / "pod" / "fast"
    stages = [yaml.safe_load((fast / f"pod-{name}.yaml").read_text()) for name in ("ready", "complete", "delete")]
    delete = stages[-1]["spec"]
    delete["selector"]["matchExpressions"].append({"key": ".metadata.finalizers", "operator": "DoesNotExist"})
    delete["next"].pop("finalizers")
    ready = stages[0]
    run = unready(copy.deepcopy(ready))
    # kwok picks one stage at random among those that match: the two must never both match.
    predicate = run_pods(run_namespace_prefix)
    ready["spec"]["selector"]["matchExpressions"].append({"key": predicate, "operator": "NotIn", "values": ["true"]})
    run["spec"]["selector"]["matchExpressions"].append({"key": predicate, "operator": "In", "values": ["true"]})
    delete["selector"]["matchExpressions"].append({"key": predicate, "operator": "NotIn", "values": ["true"]})
    return [ready, run, *stages[1:]]


def _start_kwok(sup: procs.Supervisor, plane: Plane, nodes: int, run_namespace_prefix: str, pods: int) -> procs.Proc:
    port = net.free_port(plane.host)
    stages = plane.workdir / "kwok-stages.yaml"
    stages.write_text(yaml.safe_dump_all(kwok_pod_stages(run_namespace_prefix), sort_keys=False))
    proc = sup.start(
        "kwok",
        [
            str(build.KWOK.binary("kwok")),
            f"--kubeconfig={plane.kubeconfig}",
            f"--config={stages}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            f"--cidr={plane.block.pod_cidr}",
            f"--node-ip={plane.host}",
            f"--node-port={port}",
            f"--server-address={plane.host}:{port}",
            "--node-lease-duration-seconds=40",
        ],
        env={**_base_env(), "HOME": str(plane.workdir)},  # kwok reads ~/.kwok/: keep it ours
    )
    procs.wait_for(lambda: _ok(f"http://{plane.host}:{port}/healthz"), "kwok /healthz", START_TIMEOUT_S, [proc])
    names = [f"kwok-node-{i}" for i in range(nodes)]
    plane.apply([fake_node(n, node_scale(pods, nodes)) for n in names], server_side=False)
    procs.wait_for(lambda: _nodes_ready(plane, names), f"{nodes} kwok nodes Ready", START_TIMEOUT_S, [proc])
    return proc


def _wait_default_service_account(plane: Plane) -> None:
    """Pods are refused until the serviceaccount controller has made `default`."""
    procs.wait_for(lambda: plane.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0,
                   "ServiceAccount default/default", START_TIMEOUT_S, plane.supervisor.procs)


def _base_env() -> dict[str, str]:
    """A minimal environment: etcd reads ETCD_* variables as flags, Go tools read KUBECONFIG."""
    return {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}


def start(workdir: Path | None = None, full: bool = True, nodes: int = 3, log: Log = _quiet,
          run_namespace_prefix: str = "", room: int = 0) -> Plane:
    """Start a plane (building missing binaries first); on any failure nothing is left running.
    kwok leaves the readiness of raftset's member pods in the namespaces named with
    `run_namespace_prefix` (every namespace by default, as `make run`'s pod runner runs them
    all) to the pod runner's probes (`kwok_pod_stages`). `room`: Service IPs and pods the plane
    must hold at least (a bigger loopback block than the default /20, tools/devcluster/net.py, and
    fake nodes of a bigger capacity, `node_scale`)."""
    components = build.PLANE if full else (build.ETCD, build.KUBE)
    build.ensure_all(components, log=log)

    owns = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="raftset-devcluster-")) if workdir is None else workdir
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "logs").mkdir(exist_ok=True)
    sup = procs.Supervisor(workdir / "logs")
    block = net.pick_block(prefix=net.prefix_for(room, room))
    claims = net.claim(block)
    try:
        plane = _start(sup, workdir, owns, full, nodes, log, run_namespace_prefix, block, room)
        plane.claims = claims
        return plane
    except BaseException:
        sup.stop_all()
        claims.close()
        if owns:
            shutil.rmtree(workdir, ignore_errors=True)
            log(f"start failed; logs were in {workdir / 'logs'} (removed)")
        raise


@contextmanager
def _step(timings: dict[str, float], name: str, log: Log) -> Iterator[None]:
    t0 = time.monotonic()
    yield
    timings[name] = time.monotonic() - t0
    log(f"  {name} ready in {timings[name]:.1f}s")


def _start(sup: procs.Supervisor, workdir: Path, owns: bool, full: bool, nodes: int, log: Log,
           run_namespace_prefix: str, block: net.Block, room: int) -> Plane:
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    certs = pki.make_pki(workdir / "pki", [block.host])
    with _step(timings, "etcd", log):
        etcd_url, _ = _start_etcd(sup, workdir, block.host)
    with _step(timings, "kube-apiserver", log):
        url, _ = _start_apiserver(sup, workdir, block, certs, etcd_url)
    admin = str(kubeconfig.write(
        workdir / "admin.kubeconfig",
        kubeconfig.render(url, certs.ca.cert, kubeconfig.cert_user(certs.admin.cert, certs.admin.key)),
    ))
    plane = Plane(workdir=workdir, block=block, certs=certs, url=url, kubeconfig=admin, full=full,
                  supervisor=sup, timings=timings, _owns_workdir=owns)
    if full:
        with _step(timings, "kube-controller-manager", log):
            _start_controller_manager(sup, plane)
            plane.apply(storage_class())
        with _step(timings, "kube-scheduler", log):
            _start_scheduler(sup, plane)
        with _step(timings, "kruise-manager", log):
            start_kruise(plane)
        with _step(timings, "kwok", log):
            _start_kwok(sup, plane, nodes, run_namespace_prefix, room)
        with _step(timings, "default ServiceAccount", log):
            _wait_default_service_account(plane)
    timings["total"] = time.monotonic() - t0
    log(f"control plane ({'full' if full else 'apiserver only'}) up in {timings['total']:.1f}s at {plane.url}")
    return plane
