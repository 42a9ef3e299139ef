"""`python -m tools.devcluster build|up|run`: the local control plane from the command line."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from raftset import contract
from tools.devcluster import build, net, plane, xline
from tools.devcluster.podrunner import PodRunner, pod_ip

REPO = Path(__file__).resolve().parents[2]


def _raise_on_sigterm() -> None:
    """SIGTERM ends `up`/`run` like Ctrl-C does, so teardown runs."""

    def handler(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def _wait_forever(p: plane.Plane) -> None:
    while True:
        dead = p.dead()
        if dead:
            raise SystemExit(f"control plane component(s) exited: {', '.join(dead)}; logs in {p.workdir / 'logs'}")
        time.sleep(1)


def cmd_build(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    known = {c.name for c in build.COMPONENTS} | {xline.XLINE.name}
    unknown = set(args.components) - known
    if unknown:
        raise SystemExit(f"unknown component(s) {sorted(unknown)}; choose from {sorted(known)}")
    chosen = tuple(c for c in build.COMPONENTS if not args.components or c.name in args.components)
    took = build.ensure_all(chosen)
    if not args.components or xline.XLINE.name in args.components:
        took[xline.XLINE.label] = xline.ensure(xline.XLINE)
    print("timings: " + ", ".join(f"{name} {s:.1f}s" for name, s in took.items()) + f"; total {time.monotonic() - t0:.1f}s")
    return 0


def _print_access(p: plane.Plane) -> None:
    print(f"\nexport KUBECONFIG={p.kubeconfig}")
    print(f"kubectl get nodes,pods -A   # apiserver {p.url}; logs in {p.workdir / 'logs'}\n", flush=True)


def cmd_up(args: argparse.Namespace) -> int:
    _raise_on_sigterm()
    workdir = Path(args.workdir) if args.workdir else None
    p = plane.start(workdir=workdir, full=not args.apiserver_only, log=print)
    try:
        _print_access(p)
        print("Ctrl-C or SIGTERM stops it.", flush=True)
        _wait_forever(p)
    except KeyboardInterrupt:
        print("\nstopping", flush=True)
    finally:
        p.stop()
    return 0


def _kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> None:
    subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], input=stdin, text=True, check=True)


def _install(kubeconfig: str, overlay: str) -> dict[str, str]:
    """The overlay minus its operator Deployment (no image here: the operator runs as a local
    process); returns the plain env the Deployment gives the operator (its default kind)."""
    rendered = subprocess.run(["kubectl", "kustomize", str(REPO / "kustomize" / "overlays" / overlay)],
                              capture_output=True, text=True, check=True).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    rest = [d for d in docs if d["kind"] != "Deployment"]
    _kubectl(kubeconfig, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(rest))
    crds = [f"crd/{plural}.{contract.GROUP}" for plural in (contract.PLURAL_ETCD, contract.PLURAL_XLINE)]
    _kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", *crds)
    containers = [c for d in deployments for c in d["spec"]["template"]["spec"]["containers"]]
    return {e["name"]: e["value"] for c in containers for e in c.get("env") or [] if "value" in e}


def _operator_command(configured: str | None, host: str) -> list[str]:
    """The operator as a local process; its liveness endpoint stays on loopback."""
    if configured:
        return shlex.split(configured)
    liveness = f"http://{host}:{net.free_port(host)}/healthz"
    return [sys.executable, "-m", "raftset.operator", "--liveness", liveness]


DEMO = "demo"
DEMO_XLINE = "demo-xline"


def _demo_cluster(kind: str = contract.KIND_ETCD, name: str = DEMO) -> dict:
    return {
        "apiVersion": contract.API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 3,
            # The pod runner serves the members on 127.x loopback addresses, which the
            # operator's certificates (issued for the pods' DNS names) do not name.
            "tls": {"provider": "disabled"},
            "storage": {"ephemeral": True},
        },
    }


def _print_guide(kubeconfig: str, overlay: str, endpoints: str | None, workdir: Path) -> None:
    kept = ("the leader pod stays: the operator reserves the followers' ordinals (RESERVED)"
            if overlay == "kruise" else "demo-3 and demo-4 go; a leader among them hands leadership off first")
    guide = f"""
raftset is running: operator ({overlay} overlay){', pod runner (real sidecar + etcd per pod)' if endpoints else ''}.

  export KUBECONFIG={kubeconfig}
  kubectl get etcdc,xc                       # READY 3/3 and the LEADER, from the members' heartbeats
  kubectl get pods -L raftset.dev/role       # one leader, two followers
  kubectl scale etcdc {DEMO} --replicas=5
"""
    if endpoints:
        guide += f"""
  # put the leader on the highest ordinal, the one a plain StatefulSet deletes first:
  export ETCDCTL_ENDPOINTS={endpoints}
  etcdctl endpoint status -w table           # note the ID of {DEMO}-4 (127.x.y.14)
  etcdctl move-leader <ID of {DEMO}-4>
"""
    guide += f"""
  kubectl scale etcdc {DEMO} --replicas=3     # {kept}
  kubectl get etcdc,pods -L raftset.dev/role

logs: {workdir}   Ctrl-C stops everything.
"""
    print(guide, flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    """`make run`: a plane (unless $KUBECONFIG), the overlay, the operator, the pod runner, a demo."""
    _raise_on_sigterm()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    p: plane.Plane | None = None
    operator: subprocess.Popen | None = None
    runner: PodRunner | None = None
    try:
        kubeconfig = os.environ.get("KUBECONFIG")
        if not kubeconfig:
            p = plane.start(full=True, log=print)
            kubeconfig = p.kubeconfig
        workdir = p.workdir if p else Path(tempfile.mkdtemp(prefix="raftset-run-"))
        operator_env = _install(kubeconfig, args.overlay)
        command = _operator_command(args.operator, p.host if p else "127.0.0.1")
        with open(workdir / "operator.log", "ab") as out:
            operator = subprocess.Popen(command, env={**os.environ, **operator_env, "KUBECONFIG": kubeconfig},
                                        stdout=out, stderr=subprocess.STDOUT)
        endpoints = None
        if p is not None:  # kwok pods run nothing: the pod runner plays kubelet for them
            runner = PodRunner(kubeconfig, workdir / "podrunner").__enter__()
            prefix = runner.addresses.prefix("default", DEMO)
            endpoints = ",".join(f"http://{pod_ip(prefix, o)}:{contract.CLIENT_PORT}" for o in range(5))
        demos = [_demo_cluster(), _demo_cluster(contract.KIND_XLINE, DEMO_XLINE)]
        _kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump_all(demos))
        _print_guide(kubeconfig, args.overlay, endpoints, workdir)
        while operator.poll() is None and (p is None or not p.dead()):
            time.sleep(1)
        # Either way it is unexpected: `run` lasts until Ctrl-C/SIGTERM.
        print(f"operator exit code {operator.poll()}; dead plane components: {p.dead() if p else []}", flush=True)
        return 1
    except KeyboardInterrupt:
        print("\nstopping", flush=True)
        return 0
    finally:
        if runner is not None:
            runner.close()
        if operator is not None and operator.poll() is None:
            operator.terminate()
            try:
                operator.wait(timeout=15)
            except subprocess.TimeoutExpired:
                operator.kill()
        if p is not None:
            p.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.devcluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build (or reuse from the cache) the control-plane binaries")
    # No argparse `choices` here: with nargs="*" it rejects the empty default on Python < 3.12.
    b.add_argument("components", nargs="*", help=f"any of {', '.join(sorted({c.name for c in build.COMPONENTS} | {xline.XLINE.name}))}; default: all")
    b.set_defaults(func=cmd_build)
    up = sub.add_parser("up", help="start the control plane and keep it until Ctrl-C/SIGTERM")
    up.add_argument("--apiserver-only", action="store_true", help="etcd + kube-apiserver only")
    up.add_argument("--workdir", help="keep certificates, kubeconfig and logs here instead of a temp dir")
    up.set_defaults(func=cmd_up)
    run = sub.add_parser("run", help="control plane and pod runner (unless $KUBECONFIG is set) + overlay + operator + demo")
    run.add_argument("--overlay", default="kruise", choices=("kruise", "statefulset"))
    run.add_argument("--operator", help="command that runs the operator (default: python -m raftset.operator)")
    run.set_defaults(func=cmd_run)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
