"""`make run`'s operator: the overlay's Deployment, run as a local process the way kubelet runs its pod.

The container's command, args and env come from the Deployment the overlay renders
(`container_spec`, pure); only what a pod network and a projected token would give is
replaced: `0.0.0.0:<containerPort>` binds a free port of the plane's loopback address, and
the API credentials are a TokenRequest token of the Deployment's ServiceAccount (so the
overlay's RBAC is what the operator runs with). `OperatorPod` restarts the process when it
exits or fails its livenessProbe (restartPolicy Always, with a CrashLoopBackOff), so a
`kill -9` of the operator leaves every cluster running and a new operator resumes from the API.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tools.devcluster import kubeconfig as kubeconfigs
from tools.devcluster import kubelet, net, procs

log = logging.getLogger("raftset.operatorpod")

CONTAINER = "operator"
RESTART_BACKOFF_S = (1.0, 30.0)  # kubelet's CrashLoopBackOff (10 s .. 5 min), shortened
BACKOFF_RESET_S = 60.0  # a process that ran this long restarts without backoff, as kubelet resets it


@dataclass(frozen=True)
class ContainerSpec:
    """What kubelet would run for the operator container, with loopback in place of the pod network."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    namespace: str
    service_account: str
    liveness_url: str | None
    liveness_period_s: float
    liveness_failures: int
    liveness_delay_s: float


def container_spec(deployment: Mapping[str, Any], *, host: str, ports: Mapping[int, int],
                   bin_dir: Path) -> ContainerSpec:
    """The operator container of `deployment`; `ports` maps each containerPort to a free local port,
    `bin_dir` is where the image's command is installed (the venv's bin)."""
    meta, pod = deployment["metadata"], deployment["spec"]["template"]["spec"]
    namespace = meta.get("namespace", "default")
    container = next((c for c in pod["containers"] if c["name"] == CONTAINER), None)
    if container is None:
        raise ValueError(f"Deployment {meta['name']} has no {CONTAINER!r} container")
    command = list(container.get("command") or [])
    if not command:
        raise ValueError(f"container {CONTAINER!r} names no command (the image's entrypoint is not known here)")
    command[0] = str(bin_dir / command[0])

    def local(arg: str) -> str:
        for container_port, port in ports.items():
            arg = arg.replace(f"0.0.0.0:{container_port}", f"{host}:{port}")
        if "0.0.0.0" in arg:
            raise ValueError(f"argument {arg!r} binds every address and names no containerPort")
        return arg

    env: dict[str, str] = {}
    for var in container.get("env") or []:
        source = var.get("valueFrom")
        if source is None:
            env[var["name"]] = local(str(var.get("value", "")))  # e.g. RAFTSET_METRICS_ADDRESS
        elif (source.get("fieldRef") or {}).get("fieldPath") == "metadata.namespace":
            env[var["name"]] = namespace
        elif (source.get("fieldRef") or {}).get("fieldPath") == "metadata.name":
            env[var["name"]] = f"{meta['name']}-local"  # the one replica make run runs, by its pod name
        else:
            raise ValueError(f"env {var['name']}: only values and fieldRef metadata.namespace/name are supported")
    named = {p["name"]: p["containerPort"] for p in container.get("ports") or [] if "name" in p}
    probe = container.get("livenessProbe") or {}
    liveness = None
    if "httpGet" in probe:
        port = probe["httpGet"]["port"]
        liveness = f"http://{host}:{ports[named.get(port, port)]}{probe['httpGet'].get('path', '/')}"
    return ContainerSpec(
        argv=tuple(local(a) for a in [*command, *(container.get("args") or [])]),
        env=env, namespace=namespace, service_account=pod.get("serviceAccountName") or "default",
        liveness_url=liveness, liveness_period_s=float(probe.get("periodSeconds", 10)),
        liveness_failures=int(probe.get("failureThreshold", 3)),
        liveness_delay_s=float(probe.get("initialDelaySeconds", 0)))


def free_ports(deployment: Mapping[str, Any], host: str) -> dict[int, int]:
    """A free loopback port for each containerPort of the operator container."""
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == CONTAINER)
    return {p["containerPort"]: net.free_port(host) for p in container.get("ports") or []}


def service_account_kubeconfig(admin_kubeconfig: str, namespace: str, account: str, path: Path) -> str:
    """A kubeconfig with a TokenRequest token of the ServiceAccount, as kubelet projects one."""
    token = subprocess.run(["kubectl", "--kubeconfig", admin_kubeconfig, "create", "token", account, "-n", namespace,
                            f"--duration={kubelet.TOKEN_SECONDS}s"], capture_output=True, text=True, check=True).stdout.strip()
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    return str(kubeconfigs.write(path, kubeconfigs.with_token(admin, token, account)))


def installed(spec: ContainerSpec) -> ContainerSpec:
    """`spec`, once its command is known to be installed (`make venv` installs raftset-operator)."""
    if shutil.which(spec.argv[0]) is None:
        raise FileNotFoundError(f"{spec.argv[0]} is not installed (make venv installs it)")
    return spec


class OperatorPod:
    """The operator process with restartPolicy Always and its livenessProbe, on its own thread."""

    def __init__(self, spec: ContainerSpec, kubeconfig: str, workdir: Path) -> None:
        self.spec = spec
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.supervisor = procs.Supervisor(workdir)
        self.proc: procs.Proc | None = None
        self.restarts = 0
        self._stop = threading.Event()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="operator pod", daemon=True)

    @property
    def log(self) -> Path:
        return self.workdir / f"{CONTAINER}.log"

    @property
    def pid_file(self) -> Path:
        return self.workdir / f"{CONTAINER}.pid"

    def start(self) -> OperatorPod:
        self._thread.start()
        self._started.wait(30)
        return self

    def _launch(self) -> procs.Proc:
        env = kubelet.container_env() | {**self.spec.env, "KUBECONFIG": self.kubeconfig}
        proc = self.supervisor.start(CONTAINER, self.spec.argv, env=env)
        self.pid_file.write_text(f"{proc.pid}\n")
        log.info("operator started (pid %d, restarts %d, log %s)", proc.pid, self.restarts, proc.log)
        return proc

    def _live(self) -> bool:
        if self.spec.liveness_url is None:
            return True
        try:
            return kubelet.http_get(self.spec.liveness_url, timeout=1.0)[0] == 200
        except OSError:
            return False

    def _run(self) -> None:
        """Processes are started from this thread and die with it (procs.DIE_WITH_PARENT), so this
        thread also stops them, gracefully, before it ends."""
        try:
            self._supervise()
        finally:
            self.supervisor.stop_all()

    def _supervise(self) -> None:
        backoff = RESTART_BACKOFF_S[0]
        proc = self.proc = self._launch()
        self._started.set()
        started = time.monotonic()
        next_probe, failures = started + self.spec.liveness_delay_s, 0
        while not self._stop.wait(1.0):
            now = time.monotonic()
            reason = None
            if not proc.alive():
                reason = f"exited ({proc.popen.returncode})"
            elif now >= next_probe:
                next_probe = now + self.spec.liveness_period_s
                failures = 0 if self._live() else failures + 1
                if failures >= self.spec.liveness_failures:
                    reason = f"failed its livenessProbe {failures} times"
            if reason is None:
                continue
            if now - started >= BACKOFF_RESET_S:
                backoff = RESTART_BACKOFF_S[0]
            log.warning("operator (pid %d) %s; restarting in %.0fs", proc.pid, reason, backoff)
            self.supervisor.stop(proc)
            if self._stop.wait(backoff):
                return
            backoff = min(backoff * 2, RESTART_BACKOFF_S[1])
            self.restarts += 1
            proc = self.proc = self._launch()
            started = time.monotonic()
            next_probe, failures = started + self.spec.liveness_delay_s, 0

    def close(self) -> None:
        """Stop supervising and stop the operator (SIGTERM, then SIGKILL after the grace)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=procs.STOP_GRACE_S + 20)
        self.supervisor.stop_all()  # if the thread never started
