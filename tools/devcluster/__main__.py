"""`python -m tools.devcluster build|up|run`: the local control plane from the command line."""

from __future__ import annotations

import argparse
import concurrent.futures
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from raftset import contract
from tools.devcluster import build, certmanager, demo, nodes, operatorpod, plane, procs, realrun, s3, shutdown, xline
from tools.devcluster.podrunner import PodRunner, pod_ip

REPO = Path(__file__).resolve().parents[2]


def _wait_forever(p: plane.Plane) -> None:
    while True:
        dead = p.dead()
        if dead:
            raise SystemExit(f"control plane component(s) exited: {', '.join(dead)}; logs in {p.workdir / 'logs'}")
        time.sleep(1)


# Built from their own source (not the Go module proxy): name -> (label in the timings, ensure).
SOURCE_BUILT: dict[str, tuple[str, Callable[[], float]]] = {
    xline.XLINE.name: (xline.XLINE.label, xline.ensure),
    certmanager.CERT_MANAGER.name: (f"cert-manager-{certmanager.CERT_MANAGER.version}", certmanager.ensure),
}
COMPONENT_NAMES = sorted({c.name for c in build.COMPONENTS} | set(SOURCE_BUILT))


def cmd_build(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    unknown = set(args.components) - set(COMPONENT_NAMES)
    if unknown:
        raise SystemExit(f"unknown component(s) {sorted(unknown)}; choose from {COMPONENT_NAMES}")
    chosen = tuple(c for c in build.COMPONENTS if not args.components or c.name in args.components)
    sources = [(label, ensure) for name, (label, ensure) in SOURCE_BUILT.items()
               if not args.components or name in args.components]
    # The source builds (Xline's cargo, cert-manager; both at nice 19) run beside the Go builds and beside
    # each other: on a cold machine they fill the CPU the others leave idle (module downloads,
    # single-threaded links). One after the other a cold `build` took 30 min; with the two source builds
    # in turn beside the Go builds, cert-manager's 2 min still came after Xline's 29 (docs/devcluster.md,
    # "Cold and warm times").
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(sources))) as beside:
        built = {label: beside.submit(ensure) for label, ensure in sources}
        took = build.ensure_all(chosen)
        took.update({label: future.result() for label, future in built.items()})
    print("timings: " + ", ".join(f"{name} {s:.1f}s" for name, s in took.items()) + f"; total {time.monotonic() - t0:.1f}s")
    return 0


def _print_access(p: plane.Plane) -> None:
    print(f"\nexport KUBECONFIG={p.kubeconfig}")
    print(f"kubectl get nodes,pods -A   # apiserver {p.url}; logs in {p.workdir / 'logs'}\n", flush=True)


def cmd_up(args: argparse.Namespace) -> int:
    shutdown.on_stop_signals()
    workdir = Path(args.workdir) if args.workdir else None
    p: plane.Plane | None = None
    try:
        p = plane.start(workdir=workdir, full=not args.apiserver_only, log=print)
        _print_access(p)
        print("Ctrl-C, SIGTERM or SIGHUP stops it.", flush=True)
        _wait_forever(p)
    except KeyboardInterrupt as stop:
        print(f"\nstopping ({stop})", flush=True)
    finally:
        shutdown.shield()
        if p is not None:
            p.stop()
        shutdown.stopped()
    return 0


def cmd_nodes(args: argparse.Namespace) -> int:
    """The real-node lab (docs/devcluster.md, "Real nodes: status") until a stop signal."""
    if args.sweep:
        swept = nodes.sweep()
        print(f"swept {len(swept)} abandoned run(s): {swept}" if swept else "no abandoned run")
        return 1 if any(swept.values()) else 0
    def say_how(run: nodes.Lab) -> None:
        print(f"\nexport KUBECONFIG={run.kubeconfig}")
        print(f"kubectl get nodes -o wide   # run {run.plan.run_id}, logs in {run.workdir / 'logs'}")
        print("Ctrl-C, SIGTERM or SIGHUP stops it.", flush=True)

    return nodes.serve(args.count, say_how)


def _kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> None:
    subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], input=stdin, text=True, check=True)


def _install(kubeconfig: str, overlay: str) -> dict:
    """The overlay minus its operator Deployment, which is returned: its image does not run
    here, its container runs as a local process (`operatorpod`)."""
    rendered = subprocess.run(["kubectl", "kustomize", str(REPO / "kustomize" / "overlays" / overlay)],
                              capture_output=True, text=True, check=True).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    rest = [d for d in docs if d["kind"] != "Deployment"]
    _kubectl(kubeconfig, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(rest))
    crds = [f"crd/{plural}.{contract.GROUP}" for plural in (contract.PLURAL_ETCD, contract.PLURAL_XLINE)]
    _kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", *crds)
    # What an admin does for each namespace whose clusters use the auto TLS provider
    # (docs/security.md): the demo clusters and kustomize/samples go to "default".
    _kubectl(kubeconfig, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(demo.secrets_binding(deployment, "default")))
    return deployment


def _operator(kubeconfig: str, deployment: dict, host: str, workdir: Path) -> operatorpod.OperatorPod:
    """The Deployment's operator container as a supervised local process, with its ServiceAccount's token."""
    spec = operatorpod.installed(operatorpod.container_spec(
        deployment, host=host, ports=operatorpod.free_ports(deployment, host), bin_dir=Path(sys.executable).parent))
    identity = operatorpod.service_account_kubeconfig(kubeconfig, spec.namespace, spec.service_account,
                                                      workdir / "operator.kubeconfig")
    return operatorpod.OperatorPod(spec, identity, workdir)


def _start_backup_store(kubeconfig: str, workdir: Path) -> s3.S3Server:
    """versitygw on loopback with the demo's bucket, and its keys as the Secret spec.backup names
    (applied from stdin: the secret key never shows in a process list)."""
    store = s3.start(workdir / "s3")
    try:
        store.create_bucket(demo.BACKUP_BUCKET)
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": demo.BACKUP_SECRET, "namespace": "default"},
                  "stringData": {contract.ACCESS_KEY_FILE: store.access_key, contract.SECRET_KEY_FILE: store.secret_key}}
        _kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(secret))
    except BaseException:
        store.stop()
        raise
    return store


def backup_guide(endpoint: str) -> str:
    """The printed guide's backup lines: enable spec.backup on the demo, take one now, read the result
    (the same commands as the user guide's session, which the e2e tier runs)."""
    backup = ('{"spec":{"backup":{"s3":{"endpoint":"\'$S3_ENDPOINT\'","bucket":"' + demo.BACKUP_BUCKET
              + '","credentialsSecret":"' + demo.BACKUP_SECRET + '"}}}}')
    return f"""
  # backups to a real S3 store (versitygw, bucket {demo.BACKUP_BUCKET}; the Secret {demo.BACKUP_SECRET} holds its keys):
  export S3_ENDPOINT={endpoint}
  kubectl patch etcdc {demo.NAME} --type merge -p '{backup}'   # the pods roll once: the Secret is mounted
  kubectl annotate etcdc {demo.NAME} raftset.dev/backup-now=true   # taken by the leader once its pod mounts it
  kubectl get etcdc {demo.NAME} -o jsonpath='{{.status.backup.lastSuccess}}'   # key, revision, size, sha256
"""


# Built by `make run` after its guide, for nothing it shows (the `cert-manager` TLS provider's
# tests; `make test` builds everything before it starts anyway).
ALSO_BUILT = (certmanager.CERT_MANAGER.name,)


@dataclass
class Landing:
    """A build `make run` does not wait for, and what it does once that build is there."""

    name: str  # as `python -m tools.devcluster build` names it
    built: Callable[[], bool]
    then: Callable[[], None]
    done: bool = False


def go_built(component: build.Component) -> Callable[[], bool]:
    digest = build.inputs_digest(component, build.go_version(component.module_dir))
    return lambda: build.is_built(component, digest)


class BackgroundBuild:
    """The builds `make run` does not wait for, at nice 19 in their own process group (stopped
    with everything else), logged to a file; each landing's step runs once its build is there."""

    def __init__(self, workdir: Path, landings: list[Landing]) -> None:
        self.landings = landings
        self.supervisor = procs.Supervisor(workdir / "logs")
        self.proc: procs.Proc | None = None

    def start(self) -> None:
        """The steps of what is built already, at once; then the build of the rest."""
        self.poll()
        names = [landing.name for landing in self.landings if not landing.done]
        self.proc = self.supervisor.start(
            "build", ["nice", "-n", "19", sys.executable, "-m", "tools.devcluster", "build", *names, *ALSO_BUILT],
            env=os.environ, cwd=REPO)

    @property
    def log(self) -> Path:
        return self.supervisor.log_dir / "build.log"

    def pending(self, name: str) -> bool:
        return any(landing.name == name and not landing.done for landing in self.landings)

    def poll(self) -> None:
        """Run the step of each build that landed; say once if the build failed."""
        for landing in self.landings:
            if not landing.done and landing.built():
                landing.then()
                landing.done = True
        if self.proc is not None and not self.proc.alive():
            code, self.proc = self.proc.popen.returncode, None
            left = [landing.name for landing in self.landings if not landing.done]
            if code != 0:
                print(f"the background build failed (exit {code}){'; not built: ' + ', '.join(left) if left else ''}"
                      f"; log: {self.log}", flush=True)

    def stop(self) -> None:
        self.supervisor.stop_all()


def _print_guide(kubeconfig: str, overlay: str, endpoints: str | None, workdir: Path,
                 operator: operatorpod.OperatorPod, store: s3.S3Server | None = None,
                 background: BackgroundBuild | None = None) -> None:
    kept = ("the leader pod stays: the operator reserves the followers' ordinals (RESERVED)"
            if overlay == "kruise" else "demo-3 and demo-4 go; a leader among them hands leadership off first")
    guide = f"""
raftset is running: operator ({overlay} overlay){', pod runner (real sidecar + etcd per pod)' if endpoints else ''}.

  export KUBECONFIG={kubeconfig}
  kubectl get etcdc,xc                       # READY 3/3 and the LEADER, from the members' heartbeats
  kubectl get pods -L raftset.dev/role       # one leader, two followers
  kubectl scale etcdc {demo.NAME} --replicas=5
"""
    if background is not None and background.pending(xline.XLINE.name):
        guide += f"""
  # XlineCluster {demo.XLINE_NAME} is applied once Xline's build lands (nice 19, in the background;
  # about 25 min on a 2-core machine; log: {background.log}). make run says when.
"""
    if endpoints:
        guide += f"""
  # put the leader on the highest ordinal, the one a plain StatefulSet deletes first:
  export ETCDCTL_ENDPOINTS={endpoints}
  export PATH={build.ETCD.out_dir}:$PATH   # etcdctl {build.ETCD.version}
  etcdctl endpoint status -w table           # note the ID of {demo.NAME}-4 (127.x.y.14)
  etcdctl move-leader <ID of {demo.NAME}-4>
"""
    guide += f"""
  kubectl scale etcdc {demo.NAME} --replicas=3     # {kept}
  kubectl get etcdc,pods -L raftset.dev/role

  kubectl apply -k kustomize/samples         # TLS and 2Gi volumes: an EtcdCluster and an XlineCluster
"""
    if store is not None:
        guide += backup_guide(store.endpoint)
    elif background is not None and background.pending(build.VERSITYGW.name):
        guide += f"""
  # backups: the S3 store (versitygw) starts once its build lands (log: {background.log});
  # make run then prints its lines.
"""
    guide += f"""
operator: log {operator.log}, pid in {operator.pid_file} (kill -9 it: it is restarted, as kubelet would)
logs: {workdir}   Ctrl-C stops everything.
"""
    print(guide, flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    """`make run`: a plane (unless $KUBECONFIG), the overlay, the operator, the pod runner, a demo; or,
    with `--nodes real`, the demo on real nodes (tools.devcluster.realrun)."""
    if args.nodes == "real":
        return realrun.run_demo(overlay=args.overlay or realrun.OVERLAY)
    args.overlay = args.overlay or "kruise"
    shutdown.on_stop_signals()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    p: plane.Plane | None = None
    operator: operatorpod.OperatorPod | None = None
    runner: PodRunner | None = None
    store: s3.S3Server | None = None
    background: BackgroundBuild | None = None
    workdir: Path | None = None
    try:
        kubeconfig = os.environ.get("KUBECONFIG")
        if not kubeconfig:
            # Only what the etcd demo needs before anything shows (issue 31): the rest follows.
            build.ensure_all(build.PLANE)
            p = plane.start(full=True, log=print)
            kubeconfig = p.kubeconfig
        workdir = p.workdir if p else Path(tempfile.mkdtemp(prefix="raftset-run-"))
        deployment = _install(kubeconfig, args.overlay)
        operator = _operator(kubeconfig, deployment, p.host if p else "127.0.0.1", workdir)
        operator.start()  # assigned first: a signal during start still finds it to stop
        endpoints = None
        if p is not None:  # kwok pods run nothing: the pod runner plays kubelet for them
            runner = PodRunner(kubeconfig, workdir / "podrunner")
            runner.__enter__()
            prefix = runner.addresses.prefix("default", demo.NAME)
            endpoints = ",".join(f"http://{pod_ip(prefix, o)}:{contract.CLIENT_PORT}" for o in range(5))
        if p is None:  # another cluster runs the pods from images: nothing to build here
            demos = [demo.cluster(), demo.cluster(contract.KIND_XLINE, demo.XLINE_NAME)]
            _kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump_all(demos))
        else:
            _kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(demo.cluster()))
            guided = False

            def start_store() -> None:
                # A real S3 store for spec.backup, on loopback as the members are (a cluster of our
                # own KUBECONFIG runs its pods elsewhere: they could not reach it).
                nonlocal store
                store = _start_backup_store(kubeconfig, workdir)
                if guided:
                    print(f"versitygw is built: the S3 store for backups runs{backup_guide(store.endpoint)}", flush=True)

            def apply_xline_demo() -> None:
                _kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(demo.cluster(contract.KIND_XLINE, demo.XLINE_NAME)))
                if guided:
                    print(f"Xline is built: XlineCluster {demo.XLINE_NAME} applied (kubectl get xc)", flush=True)

            background = BackgroundBuild(workdir, [
                Landing(build.VERSITYGW.name, go_built(build.VERSITYGW), start_store),
                Landing(xline.XLINE.name, xline.built, apply_xline_demo)])
            background.start()
            guided = True
        _print_guide(kubeconfig, args.overlay, endpoints, workdir, operator, store, background)
        while p is None or not p.dead():
            if background is not None:
                background.poll()
            time.sleep(1)
        # Unexpected: `run` lasts until a stop signal.
        print(f"control plane component(s) exited: {', '.join(p.dead())}; logs in {p.workdir / 'logs'}", flush=True)
        return 1
    except KeyboardInterrupt as stop:
        print(f"\nstopping ({stop})", flush=True)
        return 0
    finally:
        shutdown.shield()
        if background is not None:
            background.stop()
        if runner is not None:
            runner.close()
        if store is not None:
            store.stop()
        if operator is not None:
            operator.close()
        if p is not None:
            p.stop()
        elif workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        shutdown.stopped()
        print("stopped: every process ended, temporary files removed", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.devcluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build (or reuse from the cache) the control-plane binaries")
    # No argparse `choices` here: with nargs="*" it rejects the empty default on Python < 3.12.
    b.add_argument("components", nargs="*", help=f"any of {', '.join(COMPONENT_NAMES)}; default: all")
    b.set_defaults(func=cmd_build)
    up = sub.add_parser("up", help="start the control plane and keep it until Ctrl-C/SIGTERM")
    up.add_argument("--apiserver-only", action="store_true", help="etcd + kube-apiserver only")
    up.add_argument("--workdir", help="keep certificates, kubeconfig and logs here instead of a temp dir")
    up.set_defaults(func=cmd_up)
    nd = sub.add_parser("nodes", help="the real-node lab (kubelet, containerd) until Ctrl-C/SIGTERM")
    nd.add_argument("--count", type=int, default=3, help="nodes, one per zone (zone-a, zone-b, zone-c, zone-a, ...)")
    nd.add_argument("--sweep", action="store_true",
                    help="only tear down runs whose owner was killed (start does this too)")
    nd.set_defaults(func=cmd_nodes)
    run = sub.add_parser("run", help="control plane and pod runner (unless $KUBECONFIG is set) + overlay + operator + demo")
    run.add_argument("--overlay", choices=("kruise", "statefulset"),
                     help="default: kruise on kwok nodes, statefulset on real nodes (the only one there)")
    run.add_argument("--nodes", default="kwok", choices=("kwok", "real"),
                     help="kwok nodes with the pod runner (default), or three real nodes (docs/devcluster.md)")
    run.set_defaults(func=cmd_run)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
