"""The real sidecar and the real store for every kwok pod of a raftset cluster.

kwok marks pods Running without running anything in them. `PodRunner` follows raftset's
member pods in the API and has the stand-in kubelet (`tools.devcluster.kubelet`) run them
on loopback: for each scheduled pod the sidecar with the environment the operator
rendered, `GET /startup`, then the store; restarts with backoff; on deletion the
termination path (preStop `GET /leave`, SIGTERM the store, then the sidecar) while a
finalizer holds the pod object, as kubelet holds a terminating pod until its containers
have stopped.

Only what a pod network and volumes would give is replaced: each cluster gets one
127.A.B prefix and ordinal N listens on 127.A.B.1N (the URL templates say so), the data
dir survives pod re-creation like a PVC (wiped when the pod's `data` volume is an
emptyDir), the run dir is per pod uid like an emptyDir, and the API credentials are a
TokenRequest token of the pod's own ServiceAccount, so the member Role is exercised.
The store is the cached build its image names (etcd 3.5/3.6/3.7 by version, or Xline).
Only pods without TLS are run: the certificates the operator issues name the pods' DNS
names, not loopback IPs.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from raftset import contract, engines, versions
from raftset.contract import SidecarEnv
from tools.devcluster import kubeconfig as kubeconfigs
from tools.devcluster import build, kubelet, procs, xline

log = logging.getLogger("raftset.podrunner")

FINALIZER = f"{contract.GROUP}/podrunner"
SELECTOR = f"{contract.LABEL_MANAGED_BY}={contract.MANAGER}"
SIDECAR_CONTAINER = "sidecar"  # raftset.operator.manifests.SIDECAR_CONTAINER
POLL_S = 0.5
TOKEN_SECONDS = 24 * 3600  # a bound token; the sidecar reads its kubeconfig once
RESTART_BACKOFF_S = (1.0, 10.0)  # kubelet's CrashLoopBackOff, shortened
# No HTTP(S)_PROXY (Python clients would proxy loopback), no ETCD_* (etcd reads them as flags).
_INHERITED = ("PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH")


# ---- pure helpers


@dataclass
class AddressBook:
    """One 127.A.B prefix per (namespace, cluster), handed out in order and kept for the
    runner's life, so a re-created pod gets its old address (its member's peer URL) back."""

    first: int  # A * 256 + B of the first prefix
    given: dict[tuple[str, str], str] = field(default_factory=dict)

    def prefix(self, namespace: str, cluster: str) -> str:
        key = (namespace, cluster)
        if key not in self.given:
            a, b = divmod(self.first + len(self.given), 256)
            if not 1 <= a <= 254:
                raise ValueError(f"loopback prefixes exhausted at 127.{a}.{b}")
            self.given[key] = f"127.{a}.{b}"
        return self.given[key]


def random_book(rng: random.Random | None = None) -> AddressBook:
    """Starts in 127.128.0.0 - 127.191.255.255, which neither the planes (127.64-127) nor the
    etcd tier's labs (127.192-254) use, so parallel sessions rarely meet."""
    rng = rng or random.SystemRandom()
    return AddressBook(rng.randrange(128 * 256, 191 * 256))


def pod_ip(prefix: str, ordinal: int) -> str:
    """127.A.B.1N, the address the URL templates below give ordinal N."""
    if not 0 <= ordinal <= 99:
        raise ValueError(f"ordinal {ordinal} has no loopback address")
    return f"{prefix}.1{ordinal}"


def sidecar_spec(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    spec = pod.get("spec") or {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if container.get("name") == SIDECAR_CONTAINER:
            return container
    return None


def _field(pod: Mapping[str, Any], path: str) -> str:
    value: Any = pod
    for part in path.split("."):
        value = (value or {}).get(part)
    if value is None:
        raise ValueError(f"fieldRef {path} is not set on the pod")
    return str(value)


def declared_env(pod: Mapping[str, Any]) -> dict[str, str]:
    """The sidecar container's env as kubelet would resolve it (plain values, fieldRefs)."""
    container = sidecar_spec(pod)
    if container is None:
        raise ValueError(f"no {SIDECAR_CONTAINER!r} container in the pod")
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        if "valueFrom" in var:
            ref = var["valueFrom"].get("fieldRef")
            if ref is None:
                raise ValueError(f"env {var['name']}: only fieldRef is supported, got {var['valueFrom']}")
            env[var["name"]] = _field(pod, ref["fieldPath"])
        else:
            env[var["name"]] = str(var.get("value", ""))
    return env


# Where a pod would bind a port on its own network, a loopback member must not: Xline serves
# metrics on 0.0.0.0:9100 and cannot turn them off, so on loopback it pushes them instead.
LOOPBACK_OPTIONS = {engines.XLINE.name: {"metrics-push": "", "metrics-push-endpoint": "http://127.0.0.1:4318"}}


def loopback_env(declared: Mapping[str, str], prefix: str, ordinal: int, *, data_dir: Path, run_dir: Path,
                 kubeconfig: str) -> dict[str, str]:
    """The declared env with only the pod network, the volumes and the credentials replaced."""
    ip = pod_ip(prefix, ordinal)
    env = dict(declared)
    loopback_options = LOOPBACK_OPTIONS.get(declared.get(SidecarEnv.ENGINE, ""))
    if loopback_options:
        options = json.loads(declared.get(SidecarEnv.OPTIONS) or "{}") | loopback_options
        env[SidecarEnv.OPTIONS] = json.dumps(options, sort_keys=True)
    return {
        **env,
        SidecarEnv.PEER_URL_TEMPLATE: f"http://{prefix}.1{{ordinal}}:{contract.PEER_PORT}",
        SidecarEnv.CLIENT_URL_TEMPLATE: f"http://{prefix}.1{{ordinal}}:{contract.CLIENT_PORT}",
        SidecarEnv.LISTEN_PEER_URL: f"http://{ip}:{contract.PEER_PORT}",
        SidecarEnv.LISTEN_CLIENT_URL: f"http://{ip}:{contract.CLIENT_PORT}",
        SidecarEnv.HTTP_ADDRESS: f"{ip}:{contract.SIDECAR_PORT}",
        SidecarEnv.DATA_DIR: str(data_dir),
        SidecarEnv.RUN_DIR: str(run_dir),
        "KUBECONFIG": kubeconfig,
    }


def store_bin_dir(engine: str, image: str) -> Path:
    """The cached build the store runs: Xline's, or the etcd its image names (the default etcd else)."""
    if engine == engines.XLINE.name:
        return xline.XLINE.out_dir
    version = versions.of_image(image)
    return next((c.out_dir for c in build.ETCDS if c.version == version), build.ETCD.out_dir)


def store_image(pod: Mapping[str, Any], engine: str) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    return next((c.get("image", "") for c in containers if c.get("name") == engine), "")


def skip_reason(declared: Mapping[str, str]) -> str | None:
    """Why this runner cannot run the pod's member, or None if it can."""
    engine = declared.get(SidecarEnv.ENGINE, "etcd")
    if engine not in engines.ENGINES:
        return f"engine {engine!r} is not one raftset knows"
    if declared.get(SidecarEnv.TLS_DIR):
        return "TLS: the runner serves plaintext only (the certificates name pod DNS names, not loopback IPs)"
    return None


def ephemeral(pod: Mapping[str, Any]) -> bool:
    """The pod's `data` volume is an emptyDir (spec.storage.ephemeral), not a PVC."""
    return any(v.get("name") == "data" and "emptyDir" in v for v in (pod.get("spec") or {}).get("volumes") or [])


def grace_seconds(pod: Mapping[str, Any]) -> float:
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return float(30 if grace is None else grace)


def token_kubeconfig(admin: Mapping[str, Any], token: str) -> dict[str, Any]:
    """A kubeconfig for the same server and CA as `admin`, authenticating with `token`."""
    current = admin.get("current-context")
    context = next(c["context"] for c in admin["contexts"] if c["name"] == current)
    cluster = next(c["cluster"] for c in admin["clusters"] if c["name"] == context["cluster"])
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "pod", "cluster": dict(cluster)}],
        "users": [{"name": "pod", "user": kubeconfigs.token_user(token)}],
        "contexts": [{"name": "pod", "context": {"cluster": "pod", "user": "pod"}}],
        "current-context": "pod",
    }


def _base_env(bin_dir: Path) -> dict[str, str]:
    """`bin_dir` comes first on PATH: the store's command names its binary, not where it is."""
    env = {k: v for k, v in os.environ.items() if k in _INHERITED} | {"PYTHONUNBUFFERED": "1"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


# ---- the shell


@dataclass
class _Pod:
    """One pod's identity and directories, fixed at start."""

    namespace: str
    name: str
    uid: str
    ordinal: int
    ip: str
    grace: float
    root: Path  # per uid: run dir, kubeconfig

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def sidecar_url(self) -> str:
        return f"http://{self.ip}:{contract.SIDECAR_PORT}"


class _Worker(threading.Thread):
    """kubelet for one pod: sidecar, startup probe, store, restarts, termination."""

    def __init__(self, runner: PodRunner, pod: _Pod, env: dict[str, str], engine: engines.Engine,
                 store_env: dict[str, str]) -> None:
        super().__init__(name=f"podrunner {pod.key}", daemon=True)
        self.runner, self.pod = runner, pod
        self.containers = kubelet.MemberContainers(
            runner.supervisor, f"{pod.namespace}.{pod.name}.{pod.uid[:8]}.", engine,
            run_dir=Path(env[SidecarEnv.RUN_DIR]), sidecar_url=pod.sidecar_url, sidecar_env=env,
            store_env=store_env)
        self.terminating = False  # deletionTimestamp seen: the termination path
        self.closing = False  # the runner stops or the pod vanished: stop the processes, nothing else
        self._wake = threading.Event()

    def _start(self, what: str) -> procs.Proc:
        proc = self.containers.start_sidecar() if what == "sidecar" else self.containers.start_store()
        log.info("%s: %s started (pid %d, log %s)", self.pod.key, what, proc.pid, proc.log)
        return proc

    def terminate(self) -> None:
        self.terminating = True
        self._wake.set()

    def close(self) -> None:
        self.closing = True
        self._wake.set()

    def _stopped(self) -> bool:
        return self._wake.is_set()

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless told to stop; True if told."""
        return self._wake.wait(seconds)

    def run(self) -> None:
        try:
            self._start("sidecar")
            if self._wait_startup():
                self._start("store")
                self._supervise()
            if self.terminating and not self.closing:
                self._terminate()
            else:
                self.containers.stop(grace=10.0)
        except Exception:  # noqa: BLE001 - one pod's failure must not stop the runner
            log.exception("%s: worker failed", self.pod.key)
            self.containers.stop(grace=5.0)
        finally:
            self.runner.release(self.pod)

    def _wait_startup(self) -> bool:
        """The startupProbe: poll /startup until 200 (restarting a sidecar that exits)."""
        backoff = RESTART_BACKOFF_S[0]
        while not self._stopped():
            sidecar = self.containers.sidecar
            assert sidecar is not None
            if not sidecar.alive():
                log.warning("%s: sidecar exited (%s) before startup:\n%s", self.pod.key,
                            sidecar.popen.returncode, sidecar.tail(10))
                if self._sleep(backoff):
                    break
                backoff = min(backoff * 2, RESTART_BACKOFF_S[1])
                self._start("sidecar")
                continue
            if self.containers.startup_ok():
                return True
            self._sleep(POLL_S)
        return False

    def _supervise(self) -> None:
        """restartPolicy Always, for both containers, until the pod terminates."""
        backoff = {"sidecar": RESTART_BACKOFF_S[0], "store": RESTART_BACKOFF_S[0]}
        while not self._stopped():
            for what in ("sidecar", "store"):
                proc: procs.Proc | None = getattr(self.containers, what)
                if proc is not None and not proc.alive():
                    log.warning("%s: %s exited (%s); restarting in %.0fs:\n%s", self.pod.key, what,
                                proc.popen.returncode, backoff[what], proc.tail(5))
                    if self._sleep(backoff[what]):
                        return
                    backoff[what] = min(backoff[what] * 2, RESTART_BACKOFF_S[1])
                    self._start(what)
            self._sleep(POLL_S)

    def _terminate(self) -> None:
        """kubelet's path: preStop GET /leave, SIGTERM the store, then the sidecar, in the grace."""
        deadline = time.monotonic() + self.pod.grace
        log.info("%s: terminating (grace %.0fs)", self.pod.key, self.pod.grace)
        store = self.containers.store
        if store is not None and store.alive():
            try:
                status, _ = self.containers.pre_stop(timeout=max(1.0, deadline - time.monotonic()))
                log.info("%s: preStop GET /leave -> %s", self.pod.key, status)
            except OSError as exc:
                log.warning("%s: preStop GET /leave failed: %s", self.pod.key, exc)
        self.containers.stop(grace=max(1.0, deadline - time.monotonic()))


class PodRunner:
    """Runs the members of raftset's kwok pods (all namespaces, or one).

    Setting `stop` ends the polling; `close()` (or leaving the `with`) also stops every
    process the runner started and removes its finalizers, leaving the members as they are.

        with PodRunner(plane.kubeconfig, workdir, namespace="demo"):
            ...   # pods of EtcdClusters in "demo" now have real members
    """

    def __init__(self, kubeconfig: str, workdir: Path, stop: threading.Event | None = None, *,
                 namespace: str | None = None, addresses: AddressBook | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = Path(workdir)
        self.stop = stop or threading.Event()
        self.namespace = namespace
        self.addresses = addresses or random_book()
        self.admin = yaml.safe_load(Path(kubeconfig).read_text())
        self.core = k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=kubeconfig))
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.supervisor = procs.Supervisor(self.workdir / "logs")
        self.workers: dict[str, _Worker] = {}  # by pod uid
        self._skipped: set[str] = set()
        self._thread = threading.Thread(target=self._loop, name="podrunner", daemon=True)

    def __enter__(self) -> PodRunner:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop

    def _list(self) -> list[dict[str, Any]]:
        if self.namespace:
            resp = self.core.list_namespaced_pod(self.namespace, label_selector=SELECTOR, _preload_content=False)
        else:
            resp = self.core.list_pod_for_all_namespaces(label_selector=SELECTOR, _preload_content=False)
        return json.loads(resp.data)["items"]

    def _loop(self) -> None:
        while not self.stop.wait(POLL_S):
            try:
                self.sync(self._list())
            except Exception as exc:  # noqa: BLE001 - the API may blink; the next round retries
                log.warning("podrunner: %s", exc)

    def sync(self, pods: list[dict[str, Any]]) -> None:
        """One round: start new pods, terminate deleted ones, release what is gone."""
        seen = set()
        for pod in pods:
            meta = pod["metadata"]
            uid = meta["uid"]
            seen.add(uid)
            worker = self.workers.get(uid)
            if meta.get("deletionTimestamp"):
                if worker is not None:
                    worker.terminate()
                elif FINALIZER in (meta.get("finalizers") or []):
                    self._remove_finalizer(meta)  # held by a runner that is gone
            elif worker is None and uid not in self._skipped and (pod.get("spec") or {}).get("nodeName"):
                try:
                    self._begin(pod)
                except Exception as exc:  # noqa: BLE001 - e.g. its ServiceAccount not there yet: next round
                    log.warning("%s/%s: not started yet: %s", meta["namespace"], meta["name"], exc)
        for uid, worker in list(self.workers.items()):
            if uid not in seen:  # gone without us (finalizer removed by someone else)
                worker.close()

    def _begin(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        try:
            declared = declared_env(pod)
            reason = skip_reason(declared)
        except ValueError as exc:
            reason = str(exc)
        if reason is not None:
            log.warning("%s: not run by the pod runner: %s", key, reason)
            self._skipped.add(meta["uid"])
            return
        ordinal = contract.ordinal_of(meta["name"])
        prefix = self.addresses.prefix(meta["namespace"], declared[SidecarEnv.CLUSTER])
        volume = self.workdir / "volumes" / meta["namespace"] / meta["name"]
        if ephemeral(pod):
            shutil.rmtree(volume, ignore_errors=True)  # a new pod gets a new emptyDir
        root = self.workdir / "pods" / meta["uid"]
        (root / "run").mkdir(parents=True, exist_ok=True)
        volume.mkdir(parents=True, exist_ok=True)
        self._add_finalizer(meta)
        kubeconfig = self._pod_kubeconfig(pod, root / "kubeconfig")
        engine = engines.ENGINES[declared.get(SidecarEnv.ENGINE, engines.ETCD.name)]
        store_env = _base_env(store_bin_dir(engine.name, store_image(pod, engine.name)))
        env = store_env | loopback_env(declared, prefix, ordinal, data_dir=volume / "data",
                                       run_dir=root / "run", kubeconfig=kubeconfig)
        info = _Pod(meta["namespace"], meta["name"], meta["uid"], ordinal, pod_ip(prefix, ordinal),
                    grace_seconds(pod), root)
        worker = _Worker(self, info, env, engine, store_env)
        self.workers[meta["uid"]] = worker
        log.info("%s: running its member on %s", key, info.ip)
        worker.start()

    # -- API calls

    def _pod_kubeconfig(self, pod: dict[str, Any], path: Path) -> str:
        """The pod's own ServiceAccount, by TokenRequest bound to the pod (as kubelet projects it)."""
        meta = pod["metadata"]
        account = pod["spec"].get("serviceAccountName") or "default"
        body = {"spec": {"expirationSeconds": TOKEN_SECONDS,
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}}}
        token = self.core.create_namespaced_service_account_token(account, meta["namespace"], body).status.token
        return str(kubeconfigs.write(path, token_kubeconfig(self.admin, token)))

    def _add_finalizer(self, meta: Mapping[str, Any]) -> None:
        # Strategic merge: finalizers merge as a set; the uid makes it refuse a re-created pod.
        body = {"metadata": {"uid": meta["uid"], "finalizers": [FINALIZER]}}
        self.core.patch_namespaced_pod(meta["name"], meta["namespace"], body,
                                       _content_type="application/strategic-merge-patch+json")

    def _remove_finalizer(self, meta: Mapping[str, Any]) -> None:
        body = {"metadata": {"uid": meta["uid"], "$deleteFromPrimitiveList/finalizers": [FINALIZER]}}
        try:
            self.core.patch_namespaced_pod(meta["name"], meta["namespace"], body,
                                           _content_type="application/strategic-merge-patch+json")
        except ApiException as exc:
            if exc.status not in (404, 409, 422):  # gone, or a new pod under the same name
                raise

    def release(self, pod: _Pod) -> None:
        """The pod's processes have stopped: let the API finish deleting it."""
        try:
            self._remove_finalizer({"name": pod.name, "namespace": pod.namespace, "uid": pod.uid})
        except Exception as exc:  # noqa: BLE001
            log.warning("%s: finalizer not removed: %s", pod.key, exc)
        self.workers.pop(pod.uid, None)  # workers is only ever read whole or per key: GIL-atomic
        shutil.rmtree(pod.root, ignore_errors=True)
        log.info("%s: released", pod.key)

    def close(self) -> None:
        """Stop every process this runner started and remove its finalizers."""
        self.stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        workers = list(self.workers.values())
        for worker in workers:
            worker.close()
        for worker in workers:
            worker.join(timeout=30)
        self.supervisor.stop_all()
