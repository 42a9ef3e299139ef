"""`python -m raftset.devcluster build|up|run`: the local control plane from the command line."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from raftset import contract
from raftset.devcluster import build, net, plane

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
    known = {c.name for c in build.COMPONENTS}
    unknown = set(args.components) - known
    if unknown:
        raise SystemExit(f"unknown component(s) {sorted(unknown)}; choose from {sorted(known)}")
    chosen = tuple(c for c in build.COMPONENTS if not args.components or c.name in args.components)
    took = build.ensure_all(chosen)
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


def _kubectl(kubeconfig: str, *args: str) -> None:
    subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], check=True)


def _install(kubeconfig: str, overlay: str) -> None:
    """CRDs and the overlay's RBAC/config; falls back to bare CRDs while kustomize/ is incomplete."""
    overlay_dir = REPO / "kustomize" / "overlays" / overlay
    if (overlay_dir / "kustomization.yaml").is_file():
        _kubectl(kubeconfig, "apply", "--server-side", "-k", str(overlay_dir))
    elif (REPO / "crds").is_dir():
        _kubectl(kubeconfig, "apply", "--server-side", "-f", str(REPO / "crds"))
    crds = [f"crd/{plural}.{contract.GROUP}" for plural in (contract.PLURAL_ETCD, contract.PLURAL_XLINE)]
    _kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", *crds)


def _operator_command(configured: str | None, host: str) -> list[str]:
    """The operator as a local process; its liveness endpoint stays on loopback."""
    if configured:
        return shlex.split(configured)
    liveness = f"http://{host}:{net.free_port(host)}/healthz"
    return [sys.executable, "-m", "raftset.operator", "--liveness", liveness]


def _apply_samples(kubeconfig: str) -> None:
    samples = REPO / "kustomize" / "samples"
    if (samples / "kustomization.yaml").is_file():
        _kubectl(kubeconfig, "apply", "-k", str(samples))
    elif samples.is_dir():
        _kubectl(kubeconfig, "apply", "-f", str(samples))


def cmd_run(args: argparse.Namespace) -> int:
    """Thin wiring for `make run`; the operator command is configurable with --operator."""
    _raise_on_sigterm()
    p: plane.Plane | None = None
    operator: subprocess.Popen | None = None
    try:
        kubeconfig = os.environ.get("KUBECONFIG")
        if not kubeconfig:
            p = plane.start(full=True, log=print)
            kubeconfig = p.kubeconfig
        _install(kubeconfig, args.overlay)
        command = _operator_command(args.operator, p.host if p else "127.0.0.1")
        operator = subprocess.Popen(command, env={**os.environ, "KUBECONFIG": kubeconfig})
        _apply_samples(kubeconfig)
        print(f"\nexport KUBECONFIG={kubeconfig}\nkubectl get etcdclusters,xlineclusters,pods -A\n", flush=True)
        while operator.poll() is None and (p is None or not p.dead()):
            time.sleep(1)
        # Either way it is unexpected: `run` lasts until Ctrl-C/SIGTERM.
        print(f"operator exit code {operator.poll()}; dead plane components: {p.dead() if p else []}", flush=True)
        return 1
    except KeyboardInterrupt:
        print("\nstopping", flush=True)
        return 0
    finally:
        if operator is not None and operator.poll() is None:
            operator.terminate()
            try:
                operator.wait(timeout=15)
            except subprocess.TimeoutExpired:
                operator.kill()
        if p is not None:
            p.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raftset.devcluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build (or reuse from the cache) the control-plane binaries")
    # No argparse `choices` here: with nargs="*" it rejects the empty default on Python < 3.12.
    b.add_argument("components", nargs="*", help=f"any of {', '.join(c.name for c in build.COMPONENTS)}; default: all")
    b.set_defaults(func=cmd_build)
    up = sub.add_parser("up", help="start the control plane and keep it until Ctrl-C/SIGTERM")
    up.add_argument("--apiserver-only", action="store_true", help="etcd + kube-apiserver only")
    up.add_argument("--workdir", help="keep certificates, kubeconfig and logs here instead of a temp dir")
    up.set_defaults(func=cmd_up)
    run = sub.add_parser("run", help="control plane (unless $KUBECONFIG is set) + CRDs/RBAC + operator + samples")
    run.add_argument("--overlay", default="kruise", choices=("kruise", "statefulset"))
    run.add_argument("--operator", help="command that runs the operator (default: python -m raftset.operator)")
    run.set_defaults(func=cmd_run)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
