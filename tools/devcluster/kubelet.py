"""The one stand-in kubelet: a raftset member pod's two containers, run on loopback.

Kubelet starts a native sidecar first, waits for its startupProbe, then starts the main
container, restarts a container that exits with backoff and reports it in the pod's status
(`Backoff`, `container_status`: pure, the pod runner applies them); it runs each container's
declared readiness and liveness probes (`declared_probe`, `ProbeState`): readiness makes the
pod Ready, a liveness failure kills the container, which is then restarted; on termination
it runs the preStop hook, then stops the store and the sidecar in that order within the
grace period. `MemberContainers` does exactly these steps and
nothing else. Two drivers use it: `make run`'s pod runner (tools.devcluster.podrunner),
which follows kwok pods in the API, and the etcd tier's lab (tests.harness.lab), which
lets a test take each step by hand (start the sidecar alone, kill both, ...).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from raftset import contract, engines
from tools.devcluster import procs

SIDECAR_COMMAND = (sys.executable, "-m", "raftset.sidecar")
# Options (RAFTSET_OPTIONS) a member gets on loopback, by engine. Where a pod would bind a port
# on its own network, a loopback member must not: Xline serves metrics on 0.0.0.0 and cannot
# turn them off; in push mode it listens on nothing and only dials its collector.
# What a container inherits from this machine: no HTTP(S)_PROXY (Python clients would proxy
# loopback), no ETCD_* (etcd reads them as flags).
INHERITED_ENV = ("PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH")
TOKEN_SECONDS = 24 * 3600  # a projected ServiceAccount token's life; our processes read their kubeconfig once
LOOPBACK_OPTIONS = {engines.XLINE.name: {"metrics-push": "", "metrics-push-endpoint": "http://127.0.0.1:4318"}}


def container_env(bin_dir: Path | None = None) -> dict[str, str]:
    """The environment a container starts from: the inherited variables, unbuffered Python, and
    `bin_dir` first on PATH (a container's command names its binary, not where it is)."""
    env = {k: v for k, v in os.environ.items() if k in INHERITED_ENV} | {"PYTHONUNBUFFERED": "1"}
    if bin_dir is not None:
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def http_get(url: str, timeout: float) -> tuple[int, str]:
    """A probe or hook as kubelet sends it: a GET, no proxy (loopback only)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as resp:  # noqa: S310 - loopback only
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class MemberContainers:
    """The sidecar and the store of one member pod, as processes of a `procs.Supervisor`."""

    def __init__(self, supervisor: procs.Supervisor, name: str, engine: engines.Engine, *, run_dir: Path,
                 sidecar_url: str, sidecar_env: Mapping[str, str], store_env: Mapping[str, str],
                 client_address: tuple[str, int]) -> None:
        self.supervisor = supervisor
        self.client_address = client_address  # the pod's address (every probe goes there) and client port
        self.name = name  # prefixes the process names (and so the log files)
        self.engine = engine
        self.run_dir = run_dir
        self.sidecar_url = sidecar_url
        self.sidecar_env = dict(sidecar_env)
        self.store_env = dict(store_env)
        self.sidecar: procs.Proc | None = None
        self.store: procs.Proc | None = None

    def _running(self, proc: procs.Proc | None) -> bool:
        return proc is not None and proc.alive()

    def start_sidecar(self) -> procs.Proc:
        assert not self._running(self.sidecar), f"{self.name}: sidecar already running"
        self.sidecar = self.supervisor.start(f"{self.name}sidecar", SIDECAR_COMMAND, env=self.sidecar_env)
        return self.sidecar

    def startup_ok(self) -> bool:
        """The sidecar's startupProbe: 200 once the store's startup file is written."""
        try:
            return http_get(f"{self.sidecar_url}/startup", timeout=1.0)[0] == 200
        except OSError:
            return False

    def ready(self) -> bool:
        try:
            return http_get(f"{self.sidecar_url}/readyz", timeout=1.0)[0] == 200
        except OSError:
            return False

    def probe(self, probe: Probe) -> bool:
        """One probe as kubelet sends it to this pod's address: an httpGet passes on 2xx or 3xx,
        a tcpSocket on a connect."""
        host = self.client_address[0]
        try:
            if probe.path is None:
                with socket.create_connection((host, probe.port), timeout=probe.timeout):
                    return True
            return 200 <= http_get(f"http://{host}:{probe.port}{probe.path}", timeout=probe.timeout)[0] < 400
        except (OSError, http.client.HTTPException):
            return False

    def start_store(self) -> procs.Proc:
        assert not self._running(self.store), f"{self.name}: store already running"
        command = self.engine.command(str(self.run_dir))
        self.store = self.supervisor.start(f"{self.name}store", command, env=self.store_env)
        return self.store

    def probe_liveness(self, container: str, probe: Probe, state: ProbeState, now: float) -> ProbeState:
        """One round of a running container's (`sidecar` or `store`) livenessProbe, when due. Once
        it fails, as kubelet does: the container's preStop hook (the store has one), then it is
        stopped; the caller restarts it, whose probe starts afresh (the state returned)."""
        proc: procs.Proc | None = getattr(self, container)
        if proc is None or not proc.alive() or not state.due(probe, now):
            return state
        state = state.after(probe, self.probe(probe), now)
        if state.passing:
            return state
        if container == "store":
            with contextlib.suppress(OSError):
                self.pre_stop(timeout=5.0)
        self.supervisor.stop(proc, grace_s=5.0)
        return ProbeState.liveness(now)

    def pre_stop(self, timeout: float) -> tuple[int, str]:
        """The store container's preStop hook: GET /leave on the sidecar."""
        return http_get(f"{self.sidecar_url}/leave", timeout=timeout)

    def stop(self, grace: float) -> None:
        """SIGTERM the store, then the sidecar, each within `grace` before SIGKILL."""
        for proc in (self.store, self.sidecar):
            if proc is not None:
                self.supervisor.stop(proc, grace_s=grace)

    def kill(self) -> None:
        """Power loss: SIGKILL both, no hook, no grace."""
        for proc in (self.store, self.sidecar):
            if proc is not None:
                self.supervisor.kill(proc)


# ---- restarts as kubelet does them (restartPolicy Always), and how it reports them

# kubelet's CrashLoopBackOff is 10 s doubling to 300 s, forgotten after 2 x 300 s without an exit;
# here the same rule runs 1 s doubling to 10 s, forgotten after 20 s.
BACKOFF_S = (1.0, 10.0)
MESSAGE_BYTES, MESSAGE_LINES = 2048, 80  # terminationMessagePolicy FallbackToLogsOnError


# Probes run as declared, with their periods and initial delays scaled down as the backoff is
# (10 s -> 1 s); timeouts stay as declared: a loaded machine answers no sooner for a shorter period.
PROBE_TIME_SCALE = 0.1
# core/v1 Probe's defaults for the fields a pod leaves unset.
PROBE_DEFAULTS = {"periodSeconds": 10, "failureThreshold": 3, "successThreshold": 1,
                  "initialDelaySeconds": 0, "timeoutSeconds": 1}


@dataclass(frozen=True)
class Probe:
    """One probe as run here: an httpGet of `path` (None: a tcpSocket connect) on `port` of the
    pod's address, its periods and delays already scaled."""

    port: int
    path: str | None
    period: float
    failure_threshold: int
    success_threshold: int = 1
    initial_delay: float = 0.0
    timeout: float = 1.0


def declared_probe(container: Mapping[str, Any], kind: str) -> Probe | None:
    """The container's `kind` probe (readinessProbe, livenessProbe) as kubelet would run it,
    scaled by PROBE_TIME_SCALE; None where it declares none. A named port is the container's."""
    spec = container.get(kind)
    if not spec:
        return None
    action = spec.get("httpGet") or spec.get("tcpSocket")
    if action is None or str(action.get("scheme", "HTTP")).upper() != "HTTP":
        raise ValueError(f"{container.get('name')}: {kind} is not a plain httpGet or tcpSocket: {spec}")
    port = action["port"]
    if isinstance(port, str):
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
        if port not in ports:
            raise ValueError(f"{container.get('name')}: {kind} names port {port!r}, which it does not declare")
        port = ports[port]
    fields = PROBE_DEFAULTS | spec
    return Probe(int(port), action.get("path") or "/" if "httpGet" in spec else None,
                 period=fields["periodSeconds"] * PROBE_TIME_SCALE, failure_threshold=fields["failureThreshold"],
                 success_threshold=fields["successThreshold"],
                 initial_delay=fields["initialDelaySeconds"] * PROBE_TIME_SCALE, timeout=float(fields["timeoutSeconds"]))


# The store's livenessProbe as rendered (tcpSocket on the client port every 10 s, 6 failures),
# for the etcd tier's lab, which has no pod spec to read it from. It is what ends a removed Xline
# member, whose process keeps running with its ports closed (Capabilities.removed_member_exits).
STORE_LIVENESS = Probe(contract.CLIENT_PORT, None, period=10 * PROBE_TIME_SCALE, failure_threshold=6)


@dataclass(frozen=True)
class ProbeState:
    """kubelet's worker for one probe of one container run: the consecutive results and the
    verdict they give. A readiness verdict starts failing, a liveness one passing (kubelet's
    initial results); the verdict changes only after its threshold of results in a row."""

    started: float  # the container's start: the initial delay counts from it
    passing: bool
    probed: float | None = None
    failures: int = 0
    successes: int = 0

    @classmethod
    def readiness(cls, started: float) -> ProbeState:
        return cls(started, passing=False)

    @classmethod
    def liveness(cls, started: float) -> ProbeState:
        return cls(started, passing=True)

    def due(self, probe: Probe, now: float) -> bool:
        if self.probed is None:
            return now - self.started >= probe.initial_delay
        return now - self.probed >= probe.period

    def after(self, probe: Probe, ok: bool, now: float) -> ProbeState:
        failures, successes = (0, self.successes + 1) if ok else (self.failures + 1, 0)
        passing = self.passing
        if successes >= probe.success_threshold:
            passing = True
        elif failures >= probe.failure_threshold:
            passing = False
        return ProbeState(self.started, passing, now, failures, successes)


@dataclass(frozen=True)
class Backoff:
    """kubelet's per-container backoff entry: the current delay and when it was last updated
    (the last start); None before the first restart."""

    delay: float | None = None
    updated: float = 0.0

    def start_at(self, exited: float) -> float:
        """When a container that exited at `exited` starts again: at once unless it is still in
        backoff (its exit came less than `delay` after the last update)."""
        if self.delay is None or exited - self.updated >= self.delay:
            return exited
        return self.updated + self.delay

    def started(self, now: float) -> Backoff:
        """The entry after a restart at `now`: the first delay, or twice the last up to the cap;
        an entry older than twice the cap is forgotten (the first delay again)."""
        first, cap = BACKOFF_S
        if self.delay is None or now - self.updated > 2 * cap:
            return Backoff(first, now)
        return Backoff(min(self.delay * 2, cap), now)


@dataclass(frozen=True)
class Exit:
    """A container's last termination, as kubelet keeps it in lastState.terminated."""

    code: int  # Popen's returncode: negative for a signal
    started: datetime
    finished: datetime
    log_tail: str = ""  # the end of the container's log

    def terminated(self) -> dict[str, Any]:
        code = 128 - self.code if self.code < 0 else self.code  # killed by signal N: 128 + N
        state: dict[str, Any] = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                 "startedAt": stamp(self.started), "finishedAt": stamp(self.finished)}
        message = termination_message(self.log_tail) if code != 0 else ""
        if message:
            state["message"] = message
        return state


def termination_message(log_tail: str) -> str:
    """FallbackToLogsOnError: the last 80 lines of the log, at most their last 2048 bytes."""
    lines = "\n".join(log_tail.splitlines()[-MESSAGE_LINES:]).encode()
    return lines[-MESSAGE_BYTES:].decode(errors="replace")


def stamp(when: datetime) -> str:
    """An API timestamp (RFC 3339, seconds, UTC)."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def container_status(name: str, image: str, restarts: int, last: Exit | None, *,
                     running_since: datetime | None, backoff: float | None, pod: str,
                     ready: bool) -> dict[str, Any]:
    """One entry of status.containerStatuses: running since a start (`ready` as its readiness
    probe says), or waiting in CrashLoopBackOff for `backoff` seconds; restartCount and the
    last termination either way."""
    if running_since is not None:
        state: dict[str, Any] = {"running": {"startedAt": stamp(running_since)}}
    else:
        state = {"waiting": {"reason": "CrashLoopBackOff",
                             "message": f"back-off {backoff or 0:g}s restarting failed container={name} pod={pod}"}}
    return {"name": name, "image": image, "imageID": "", "ready": ready and running_since is not None,
            "started": running_since is not None, "restartCount": restarts, "state": state,
            "lastState": {"terminated": last.terminated()} if last is not None else {}}


def with_container(statuses: list[dict[str, Any]], status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pod's containerStatuses with one container's entry replaced (the list is replaced whole
    by a patch: it has no merge key)."""
    return [dict(status) if s.get("name") == status["name"] else s for s in statuses] + (
        [] if any(s.get("name") == status["name"] for s in statuses) else [dict(status)])
