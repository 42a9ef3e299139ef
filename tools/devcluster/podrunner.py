"""The real sidecar and the real store for every kwok pod of a raftset cluster.

kwok marks pods Running without running anything in them. `PodRunner` follows raftset's
member pods in the API and has the stand-in kubelet (`tools.devcluster.kubelet`) run them
on loopback: for each scheduled pod the sidecar with the environment the operator
rendered, `GET /startup`, then the store; the containers' declared readiness and liveness
probes (scaled down), the pod's Ready condition set from the store's readinessProbe (kwok
leaves these pods unready: tools.devcluster.plane.kwok_pod_stages); restarts with kubelet's
backoff (scaled down), the store's restartCount, state and last termination written to the
pod's status as kubelet writes them (the sidecar's crash-loop diagnosis reads them); on deletion the
termination path (preStop `GET /leave`, SIGTERM the store, then the sidecar) while a
finalizer holds the pod object, as kubelet holds a terminating pod until its containers
have stopped.

Only what a pod network and volumes would give is replaced: each cluster gets one
127.A.B prefix and ordinal N listens on 127.A.B.1N (the URL templates say so), the data
dir is the directory of the PersistentVolume bound to the pod's claim (the plane's
hostPath provisioner made it; a per-pod directory, wiped on re-creation, for an emptyDir;
a backup claim the sidecar mounts is served the same way),
the run dir is per pod uid like an emptyDir, the store's scratch volume is the host's /tmp (where
the store, a process on this host, writes its scratch), and the API credentials are a TokenRequest
token of the pod's own ServiceAccount, so the member Role is exercised. The `tls` volume
is projected from its Secrets into a per-pod directory, with the server and peer
certificates re-issued by the cluster's own CA (`<name>-ca`: provider `auto`'s, or cert-manager's
chain without an issuerRef) to also name the member's loopback address, which the operator
cannot know. The store is the cached build its image
names (etcd 3.5/3.6/3.7 by version, or Xline). A pod the runner cannot run (certificates of a
user's issuer, whose CA key it does not hold; an unknown engine) gets a Warning Event, on
the pod and on its cluster, saying why.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import random
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from raftset import contract, engines
from raftset.operator.pure import versions
from raftset.contract import SidecarEnv
from raftset.operator.pure import certificates
from raftset.sidecar.supervision import TEST_FAULT_DIR_ENV
from tools.devcluster import kubeconfig as kubeconfigs
from tools.devcluster import build, kubelet, podfaults, procs, xline

log = logging.getLogger("raftset.podrunner")

FINALIZER = f"{contract.GROUP}/podrunner"
SELECTOR = f"{contract.LABEL_MANAGED_BY}={contract.MANAGER}"
SIDECAR_CONTAINER = "sidecar"  # raftset.operator.pure.pod_template.SIDECAR_CONTAINER
NOT_RUN_REASON = "NotRunLocally"  # the Warning Event on a pod (and its cluster) the runner cannot run
POLL_S = 0.5
# Where a plane is shared with tests whose members do not run (the e2e tier, the benchmarks): the
# namespaces whose pods a runner runs are named with this, and kwok leaves those pods'
# readiness to the runner (tools.devcluster.plane.start(run_namespace_prefix=...)).
RUN_NAMESPACE_PREFIX = "run-"


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


def with_port(url: str, port: int) -> str:
    """`url` (scheme://host:port) on another port."""
    return f"{url.rsplit(':', 1)[0]}:{port}"


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


def loopback_env(declared: Mapping[str, str], prefix: str, ordinal: int, *, data_dir: Path, run_dir: Path,
                 kubeconfig: str, tls_dir: Path | None = None) -> dict[str, str]:
    """The declared env with only the pod network, the volumes and the credentials replaced. The
    store's scratch volume is where a process on this host writes its scratch (engines.Scratch.path:
    the store runs here, so its /tmp is the host's)."""
    ip = pod_ip(prefix, ordinal)
    engine = engines.ENGINES.get(declared.get(SidecarEnv.ENGINE, ""))
    scratch_dir = engine.scratch.path if engine is not None and engine.scratch is not None else ""
    env = dict(declared)
    scheme = "http"
    if declared.get(SidecarEnv.TLS_DIR):
        if tls_dir is None:
            raise ValueError("the pod mounts TLS material and no local copy of it was given")
        env[SidecarEnv.TLS_DIR] = str(tls_dir)
        scheme = "https"
    loopback_options = kubelet.LOOPBACK_OPTIONS.get(declared.get(SidecarEnv.ENGINE, ""))
    if loopback_options:
        options = json.loads(declared.get(SidecarEnv.OPTIONS) or "{}") | loopback_options
        env[SidecarEnv.OPTIONS] = json.dumps(options, sort_keys=True)
    return {
        **env,
        SidecarEnv.PEER_URL_TEMPLATE: f"{scheme}://{prefix}.1{{ordinal}}:{contract.PEER_PORT}",
        SidecarEnv.CLIENT_URL_TEMPLATE: f"{scheme}://{prefix}.1{{ordinal}}:{contract.CLIENT_PORT}",
        SidecarEnv.LISTEN_PEER_URL: f"{scheme}://{ip}:{contract.PEER_PORT}",
        SidecarEnv.LISTEN_CLIENT_URL: f"{scheme}://{ip}:{contract.CLIENT_PORT}",
        # Xline binds its metrics port on 0.0.0.0: on loopback it pushes them (kubelet.LOOPBACK_OPTIONS).
        SidecarEnv.LISTEN_METRICS_URL: "" if loopback_options else f"http://{ip}:{contract.METRICS_PORT}",
        SidecarEnv.HTTP_ADDRESS: f"{ip}:{contract.SIDECAR_PORT}",
        SidecarEnv.DATA_DIR: str(data_dir),
        SidecarEnv.RUN_DIR: str(run_dir),
        **({SidecarEnv.SCRATCH_DIR: scratch_dir} if declared.get(SidecarEnv.SCRATCH_DIR) else {}),
        "KUBECONFIG": kubeconfig,
    }


def _store_builds() -> dict[str, list[tuple[str, Path]]]:
    """(version, directory) of the cached builds a member may run, per engine, the default first.
    Not in the engine description: which builds sit in this machine's cache is the dev
    cluster's business, not the product's."""
    return {engines.ETCD.name: [(c.version, c.out_dir) for c in build.ETCDS],  # ETCDS[0] is build.ETCD
            engines.XLINE.name: [(xline.XLINE.version, xline.XLINE.out_dir)]}


def store_build(engine: str, image: str) -> tuple[Path, str | None]:
    """The cached build the store runs: the one its image's version names, else the engine's
    default, with a note saying so (a substitute is said, never silent)."""
    known = _store_builds()[engine]
    # `make run` builds only the default etcd before it starts, Xline in the background.
    builds = [(v, path) for v, path in known if path.is_dir()]
    if not builds:
        default_version, default_dir = known[0]
        return default_dir, f"{engine} {default_version} is not built yet: its store cannot start until it is"
    version = versions.of_image(image)
    exact = next((path for v, path in builds if v == version), None)
    if exact is not None:
        return exact, None
    default_version, default_dir = builds[0]
    return default_dir, (f"no local build of {engine} {version or image!r}: "
                         f"runs {engine} {default_version} (builds here: {', '.join(v for v, _ in builds)})")


def store_bin_dir(engine: str, image: str) -> Path:
    return store_build(engine, image)[0]


def store_image(pod: Mapping[str, Any], engine: str) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    return next((c.get("image", "") for c in containers if c.get("name") == engine), "")


def skip_reason(declared: Mapping[str, str]) -> str | None:
    """Why this runner cannot run the pod's member, or None if it can."""
    engine = declared.get(SidecarEnv.ENGINE, "etcd")
    if engine not in engines.ENGINES:
        return f"engine {engine!r} is not one raftset knows"
    return None


def ephemeral(pod: Mapping[str, Any]) -> bool:
    """The pod's `data` volume is an emptyDir (spec.storage.ephemeral), not a PVC."""
    return any(v.get("name") == "data" and "emptyDir" in v for v in (pod.get("spec") or {}).get("volumes") or [])


def starts_empty(pod: Mapping[str, Any], lost: bool) -> bool:
    """The pod's data volume is wiped before it starts: its disk was lost (`PodRunner.lose`),
    or it is a new pod's new emptyDir."""
    return lost or (claim_name(pod) is None and ephemeral(pod))


@dataclass(frozen=True)
class SidecarMount:
    """One Secret or claim volume the sidecar mounts (backup credentials, a backup PVC)."""

    path: str  # the mountPath
    secret: str | None = None
    items: tuple[tuple[str, str], ...] | None = None  # (key, path); None: every key under its own name
    optional: bool = False
    claim: str | None = None


def sidecar_mounts(pod: Mapping[str, Any]) -> list[SidecarMount]:
    """The sidecar's Secret and claim mounts, as kubelet would provide them; other kinds
    (the `run`, `data` and `tls` volumes) the runner provides itself."""
    container = sidecar_spec(pod) or {}
    volumes = {v["name"]: v for v in (pod.get("spec") or {}).get("volumes") or []}
    mounts = []
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"]) or {}
        if "secret" in volume:
            ref = volume["secret"]
            items = ref.get("items")
            mounts.append(SidecarMount(
                mount["mountPath"], secret=ref["secretName"], optional=bool(ref.get("optional")),
                items=None if items is None else tuple((i["key"], i["path"]) for i in items)))
        elif "persistentVolumeClaim" in volume:
            mounts.append(SidecarMount(mount["mountPath"], claim=volume["persistentVolumeClaim"]["claimName"]))
    return mounts


def claim_name(pod: Mapping[str, Any]) -> str | None:
    """The PersistentVolumeClaim behind the pod's `data` volume; None for an emptyDir."""
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if volume.get("name") == "data" and "persistentVolumeClaim" in volume:
            return volume["persistentVolumeClaim"]["claimName"]
    return None


def tls_sources(pod: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(Secret, key, path) of every item of the pod's projected `tls` volume."""
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if volume.get("name") == "tls":
            return [(src["secret"]["name"], item["key"], item["path"])
                    for src in volume.get("projected", {}).get("sources", []) if "secret" in src
                    for item in src["secret"].get("items") or []]
    return []


# The projected files the runner re-issues with the member's loopback address added.
_REISSUED = {"server.crt": ("server.key", certificates.SERVER), "peer.crt": ("peer.key", certificates.PEER)}


def loopback_leaf(cert_pem: bytes, purpose: str, ip: str) -> certificates.LeafSpec:
    """The leaf `cert_pem` is, with `ip` added to its IP SANs (its names and usages kept)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    dns, ips = certificates.subject_alt_names(cert_pem)
    common_name = cert.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)[0].value
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    return certificates.LeafSpec(
        purpose, str(common_name), tuple(sorted(dns)), tuple(sorted(ips | {ip})),
        server_auth=x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usages,
        client_auth=x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH in usages)


def project_tls(files: Mapping[str, bytes], cas: Sequence[certificates.KeyPair], ip: str) -> dict[str, bytes]:
    """The `tls` volume's files as the member on `ip` needs them: the server and peer
    certificates re-issued by the CA that signed them (one of `cas`, the CA key pairs the runner
    has seen) to name `ip` too. Without that CA's key (a user's issuer signed them) the member
    cannot be served on loopback: ValueError."""
    out = dict(files)
    now = datetime.now(timezone.utc)
    for cert_path, (key_path, purpose) in _REISSUED.items():
        if cert_path in files:
            issuer = next((ca for ca in cas if certificates.signed_by(files[cert_path], ca.cert_pem)), None)
            if issuer is None:
                raise ValueError(f"TLS by cert-manager or another issuer: its certificates name the pods' DNS names, "
                                 f"not the loopback address the member would serve on here, and the runner holds "
                                 f"no key of the CA that signed {cert_path}")
            pair = certificates.issue(issuer, loopback_leaf(files[cert_path], purpose, ip), now)
            out[cert_path], out[key_path] = pair.cert_pem, pair.key_pem
    return out


def not_run_events(meta: Mapping[str, Any], reason: str, now: datetime) -> list[dict[str, Any]]:
    """The Warning Events that say why the pod's member does not run: on the pod, and on its
    cluster when its labels name one of a known kind."""
    labels = meta.get("labels") or {}
    engine = engines.ENGINES.get(labels.get(contract.LABEL_ENGINE, ""))
    targets = [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}]
    cluster = labels.get(contract.LABEL_INSTANCE)
    if engine is not None and cluster:
        targets.append({"apiVersion": contract.API_VERSION, "kind": engine.kind, "name": cluster})
    return [{
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {**target, "namespace": meta["namespace"]},
        "reason": NOT_RUN_REASON, "type": "Warning", "count": 1,
        "message": f"{meta['name']}: not run by make run's pod runner: {reason}",
        "source": {"component": "raftset-podrunner"},
        "firstTimestamp": now, "lastTimestamp": now,
    } for target in targets]


@dataclass(frozen=True)
class PodProbes:
    """The probes a member pod declares, as the stand-in kubelet runs them."""

    store_readiness: kubelet.Probe | None
    store_liveness: kubelet.Probe | None
    sidecar_liveness: kubelet.Probe | None


def pod_probes(pod: Mapping[str, Any], engine: str) -> PodProbes:
    """The store container's (named after its engine) and the sidecar's declared probes."""
    store = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == engine), {})
    sidecar = sidecar_spec(pod) or {}
    return PodProbes(kubelet.declared_probe(store, "readinessProbe"), kubelet.declared_probe(store, "livenessProbe"),
                     kubelet.declared_probe(sidecar, "livenessProbe"))


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """The pod's Ready condition, as the API has it."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def grace_seconds(pod: Mapping[str, Any]) -> float:
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return float(30 if grace is None else grace)


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
                 store_env: dict[str, str], probes: PodProbes) -> None:
        super().__init__(name=f"podrunner {pod.key}", daemon=True)
        self.runner, self.pod, self.probes = runner, pod, probes
        self.containers = kubelet.MemberContainers(
            runner.supervisor, f"{pod.namespace}.{pod.name}.{pod.uid[:8]}.", engine,
            run_dir=Path(env[SidecarEnv.RUN_DIR]), sidecar_url=pod.sidecar_url, sidecar_env=env,
            store_env=store_env, client_address=(pod.ip, contract.CLIENT_PORT))
        self.terminating = False  # deletionTimestamp seen: the termination path
        self.closing = False  # the runner stops or the pod vanished: stop the processes, nothing else
        self._wake = threading.Event()
        self.store_started = datetime.now(timezone.utc)
        self.store_restarts = 0  # the store container's restartCount
        self.store_exit: kubelet.Exit | None = None  # its lastState.terminated
        self.store_backoff: float | None = None  # seconds it waits in CrashLoopBackOff; None while it runs
        self.readiness = kubelet.ProbeState.readiness(time.monotonic())  # the store's, per start
        # The sidecar's startupProbe passed in its current run: kubelet probes its liveness only
        # from then on, and counts it ready (it declares no readinessProbe).
        self.sidecar_started_up = False
        self.reported_ready: bool | None = None  # the Ready condition last written
        self.reported_at = 0.0  # when (monotonic)
        self.observed: tuple[float, bool] | None = None  # (listed at, Ready) from the runner's last list

    def _start(self, what: str) -> procs.Proc:
        proc = self.containers.start_sidecar() if what == "sidecar" else self.containers.start_store()
        if what == "sidecar":
            self.sidecar_started_up = False
        if what == "store":
            self.store_started = datetime.now(timezone.utc)
            self.store_backoff = None
            self.readiness = kubelet.ProbeState.readiness(time.monotonic())
        log.info("%s: %s started (pid %d, log %s)", self.pod.key, what, proc.pid, proc.log)
        return proc

    def observe(self, pod: Mapping[str, Any], listed_at: float) -> None:
        """The pod as the runner's list (begun at `listed_at`) saw it."""
        self.observed = (listed_at, pod_ready(pod))

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
            self.runner.release(self.pod, deleted=self.terminating)

    def _wait_startup(self) -> bool:
        """The startupProbe: poll /startup until 200 (restarting a sidecar that exits)."""
        backoff = kubelet.Backoff()
        while not self._stopped():
            sidecar = self.containers.sidecar
            assert sidecar is not None
            if not sidecar.alive():
                log.warning("%s: sidecar exited (%s) before startup:\n%s", self.pod.key,
                            sidecar.popen.returncode, sidecar.tail(10))
                now = time.monotonic()
                if self._sleep(backoff.start_at(now) - now):
                    break
                backoff = backoff.started(time.monotonic())
                self._start("sidecar")
                continue
            if self.containers.startup_ok():
                self.sidecar_started_up = True
                return True
            self._sleep(POLL_S)
        return False

    def _supervise(self) -> None:
        """restartPolicy Always, for both containers, until the pod terminates, with kubelet's
        backoff (kubelet.Backoff) and the declared probes (kubelet.ProbeState): a failed liveness
        probe stops its container (then restarted), the store's readiness probe makes the pod
        Ready; the store's exits and restarts show in the pod's status."""
        backoff = {"sidecar": kubelet.Backoff(), "store": kubelet.Backoff()}
        due: dict[str, float] = {}  # an exited container: when it starts again
        now = time.monotonic()
        liveness = {"sidecar": kubelet.ProbeState.liveness(now), "store": kubelet.ProbeState.liveness(now)}
        declared = {"sidecar": self.probes.sidecar_liveness, "store": self.probes.store_liveness}
        while not self._stopped():
            if not self.sidecar_started_up and self.containers.startup_ok():  # a restarted sidecar's startupProbe
                self.sidecar_started_up = True
                liveness["sidecar"] = kubelet.ProbeState.liveness(time.monotonic())
            for what, probe in declared.items():
                if probe is not None and (what == "store" or self.sidecar_started_up):
                    before = liveness[what]
                    liveness[what] = self.containers.probe_liveness(what, probe, before, time.monotonic())
                    if liveness[what] is not before and liveness[what].probed is None:  # a fresh run's state
                        log.warning("%s: %s failed its livenessProbe; stopped, to be restarted", self.pod.key, what)
            self._probe_readiness()
            for what in ("sidecar", "store"):
                proc: procs.Proc | None = getattr(self.containers, what)
                now = time.monotonic()
                if proc is None or proc.alive():
                    continue
                if what not in due:
                    due[what] = backoff[what].start_at(now)
                    log.warning("%s: %s exited (%s); restarting in %.0fs:\n%s", self.pod.key, what,
                                proc.popen.returncode, due[what] - now, proc.tail(5))
                    if what == "store":
                        self.store_exit = kubelet.Exit(proc.popen.returncode, self.store_started,
                                                       datetime.now(timezone.utc), proc.tail(kubelet.MESSAGE_LINES))
                        self.store_backoff = due[what] - now
                        if due[what] > now:
                            self._report()
                elif now >= due[what]:
                    del due[what]
                    backoff[what] = backoff[what].started(now)
                    self._start(what)
                    liveness[what] = kubelet.ProbeState.liveness(now)
                    if what == "store":
                        self.store_restarts += 1
                        self._report()
            if self._ready() != self.reported_ready or self._ready() != self._observed_ready():
                self._report()
            self._sleep(POLL_S)

    def _probe_readiness(self) -> None:
        """The store's readinessProbe, when due, while the store runs (no probe declared: ready
        once it runs, as kubelet has it)."""
        probe, store = self.probes.store_readiness, self.containers.store
        if store is None or not store.alive():
            return
        now = time.monotonic()
        if probe is None:
            self.readiness = dataclasses.replace(self.readiness, passing=True)
        elif self.readiness.due(probe, now):
            self.readiness = self.readiness.after(probe, self.containers.probe(probe), now)

    def _ready(self) -> bool:
        """The pod's Ready condition: both containers run and the store's readiness probe passes
        (the sidecar declares no readinessProbe: it is ready once its startupProbe passed)."""
        sidecar, store = self.containers.sidecar, self.containers.store
        return (sidecar is not None and sidecar.alive() and self.sidecar_started_up
                and store is not None and store.alive() and self.readiness.passing)

    def _observed_ready(self) -> bool | None:
        """The Ready condition in the API, as listed after the last write (None: not seen since):
        someone else's write, or a lost one, is written over as kubelet's status manager does."""
        if self.observed is None or self.observed[0] <= self.reported_at:
            return self.reported_ready
        return self.observed[1]

    def _report(self) -> None:
        """The store container's entry in the pod's status and the pod's Ready condition, as
        kubelet writes them: restartCount, lastState.terminated (exit code, reason, the log's
        end as message), running (ready as its readinessProbe says) or waiting in
        CrashLoopBackOff; Ready and ContainersReady as `_ready`."""
        name = self.containers.engine.name
        core, pod = self.runner.core, self.pod
        ready = self._ready()
        store = self.containers.store
        try:
            current = core.read_namespaced_pod_status(pod.name, pod.namespace, _preload_content=False)
            status = json.loads(current.data).get("status") or {}
            statuses = status.get("containerStatuses") or []
            image = next((s.get("image", "") for s in statuses if s.get("name") == name), "")
            running = self.store_started if store is not None and store.alive() else None
            entry = kubelet.container_status(name, image, self.store_restarts, self.store_exit,
                                             running_since=running, backoff=self.store_backoff, pod=pod.name,
                                             ready=ready)
            now = kubelet.stamp(datetime.now(timezone.utc))
            conditions = [{"type": t, "status": "True" if ready else "False", "lastTransitionTime": now}
                          for t in ("Ready", "ContainersReady")]
            body = {"metadata": {"uid": pod.uid}, "status": {
                "containerStatuses": kubelet.with_container(statuses, entry), "conditions": conditions}}
            self.reported_at = time.monotonic()
            core.patch_namespaced_pod_status(pod.name, pod.namespace, body)
            self.reported_ready = ready
            log.info("%s: %s", pod.key, "Ready" if ready else "not Ready")
        except Exception as exc:  # noqa: BLE001 - the API may blink: a lost report must not stop the pod
            log.warning("%s: status of %s not written: %s", pod.key, name, exc)

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
                 namespace: str | None = None, addresses: AddressBook | None = None,
                 peer_listen: Callable[[str], int] | None = None, faults: Path | None = None,
                 skewable_clocks: bool = False, volume_mb: int | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = Path(workdir)
        self.stop = stop or threading.Event()
        self.namespace = namespace
        self.addresses = addresses or random_book()
        # Called with a pod's address before its member starts: the port the member listens for
        # peers on instead of :2380, which stays its advertised peer URL. Whoever sets it forwards
        # :2380 there (a benchmark's Toxiproxy adds the latency between zones that way).
        self.peer_listen = peer_listen
        # Test-only: each sidecar's RAFTSET_TEST_FAULT_DIR is `fault_dir(namespace, pod)` under it,
        # where a test hangs one pod's loop (raftset.sidecar.supervision). None: no hook at all.
        self.faults = faults
        # Test-only, for two more faults (tools.devcluster.podfaults): every sidecar under libfaketime,
        # its offset in `clock_offset(namespace, pod)`; every member's volume a tmpfs of `volume_mb`.
        self.skewable_clocks = skewable_clocks
        self.volume_mb = volume_mb
        self.volumes: dict[str, Path] = {}  # by namespace/pod: the volume its member last started on
        self._small: set[Path] = set()  # the tmpfs mounts made for volume_mb
        self.admin = yaml.safe_load(Path(kubeconfig).read_text())
        self.core = k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=kubeconfig))
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.supervisor = procs.Supervisor(self.workdir / "logs")
        self.workers: dict[str, _Worker] = {}  # by pod uid
        self._skipped: set[str] = set()
        self._lost: set[str] = set()  # namespace/pod whose next pod starts on a new, empty volume
        self._waiting: dict[str, str] = {}  # by pod uid: why it could not start yet
        # Every CA key pair read from a cluster's CA Secret: a leaf is re-issued by its own signer, so a
        # pod restarted mid-rotation (its leaves still the old CA's, that CA's Secret gone) serves as it would.
        self._cas: list[certificates.KeyPair] = []
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
                listed_at = time.monotonic()
                self.sync(self._list(), listed_at)
            except Exception as exc:  # noqa: BLE001 - the API may blink; the next round retries
                log.warning("podrunner: %s", exc)

    def sync(self, pods: list[dict[str, Any]], listed_at: float | None = None) -> None:
        """One round: start new pods, terminate deleted ones, release what is gone; each
        running pod's worker sees the pod as listed (from `listed_at`)."""
        listed_at = time.monotonic() if listed_at is None else listed_at
        seen = set()
        for pod in pods:
            meta = pod["metadata"]
            uid = meta["uid"]
            seen.add(uid)
            worker = self.workers.get(uid)
            if worker is not None:
                worker.observe(pod, listed_at)
            if meta.get("deletionTimestamp"):
                if worker is not None:
                    worker.terminate()
                else:  # nothing of it runs: never started, skipped, or held by a runner that is gone
                    self._delete_terminated(meta)
            elif worker is None and uid not in self._skipped and (pod.get("spec") or {}).get("nodeName"):
                try:
                    self._begin(pod)
                except Exception as exc:  # noqa: BLE001 - e.g. its claim or Secret not there yet: next round
                    if self._waiting.get(uid) != str(exc):  # said once, not every round
                        self._waiting[uid] = str(exc)
                        log.warning("%s/%s: not started yet: %s", meta["namespace"], meta["name"], exc)
        for uid, worker in list(self.workers.items()):
            if uid not in seen:  # gone without us (finalizer removed by someone else)
                worker.close()

    def _begin(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        ordinal = contract.ordinal_of(meta["name"])
        probes: PodProbes | None = None
        try:
            declared = declared_env(pod)
            reason = skip_reason(declared)
            prefix = self.addresses.prefix(meta["namespace"], declared[SidecarEnv.CLUSTER]) if reason is None else ""
            tls = self._tls_files(pod, pod_ip(prefix, ordinal)) if reason is None and declared.get(SidecarEnv.TLS_DIR) else None
            probes = pod_probes(pod, declared.get(SidecarEnv.ENGINE, engines.ETCD.name)) if reason is None else None
        except ValueError as exc:
            reason = str(exc)
        if reason is not None:
            log.warning("%s: not run by the pod runner: %s", key, reason)
            self._skipped.add(meta["uid"])
            self._warn_not_run(pod, reason)
            return
        claim = claim_name(pod)
        if claim is not None:
            volume = self._claim_dir(meta["namespace"], claim)
        else:
            volume = self.workdir / "volumes" / meta["namespace"] / meta["name"]
        if starts_empty(pod, key in self._lost):
            shutil.rmtree(volume, ignore_errors=True)
            self._lost.discard(key)
        root = self.workdir / "pods" / meta["uid"]
        (root / "run").mkdir(parents=True, exist_ok=True)
        volume.mkdir(parents=True, exist_ok=True)
        if self.volume_mb is not None:
            podfaults.mount_small(volume, self.volume_mb)
            self._small.add(volume)
        self.volumes[key] = volume
        tls_dir = None
        if tls is not None:
            tls_dir = root / "tls"
            tls_dir.mkdir(mode=0o700, exist_ok=True)
            for path, data in tls.items():
                (tls_dir / path).write_bytes(data)
                (tls_dir / path).chmod(0o400 if path.endswith(".key") else 0o444)
        self._add_finalizer(meta)
        kubeconfig = self._pod_kubeconfig(pod, root / "kubeconfig")
        engine = engines.ENGINES[declared.get(SidecarEnv.ENGINE, engines.ETCD.name)]
        bin_dir, substitute = store_build(engine.name, store_image(pod, engine.name))
        if substitute:
            log.warning("%s: %s", key, substitute)
        store_env = kubelet.container_env(bin_dir)
        env = store_env | loopback_env(declared, prefix, ordinal, data_dir=volume / "data",
                                       run_dir=root / "run", kubeconfig=kubeconfig, tls_dir=tls_dir)
        if self.peer_listen is not None:
            port = self.peer_listen(pod_ip(prefix, ordinal))
            env[SidecarEnv.LISTEN_PEER_URL] = with_port(env[SidecarEnv.LISTEN_PEER_URL], port)
        # The pod's own /tmp, as a container has: the kube client writes the pod's client key
        # there, and a killed pod must not leave it in the host's /tmp.
        (root / "tmp").mkdir(mode=0o700, exist_ok=True)
        env["TMPDIR"] = str(root / "tmp")
        if self.faults is not None:
            faults = self.fault_dir(meta["namespace"], meta["name"])
            faults.mkdir(parents=True, exist_ok=True)
            env[TEST_FAULT_DIR_ENV] = str(faults)
        if self.skewable_clocks:
            env |= podfaults.skewable_clock(self.clock_offset(meta["namespace"], meta["name"]))
        if self._sidecar_volumes(pod, root / "mounts"):
            env[SidecarEnv.BACKUP_MOUNT_ROOT] = str(root / "mounts")
        info = _Pod(meta["namespace"], meta["name"], meta["uid"], ordinal, pod_ip(prefix, ordinal),
                    grace_seconds(pod), root)
        assert probes is not None
        worker = _Worker(self, info, env, engine, store_env, probes)
        self.workers[meta["uid"]] = worker
        log.info("%s: running its member on %s (data in %s)", key, info.ip, volume)
        worker.start()

    def fault_dir(self, namespace: str, name: str) -> Path:
        """Where a test puts `<loop>.hang` for this pod's sidecar (kept across the pod's re-creations)."""
        assert self.faults is not None, "PodRunner(faults=...) enables the test fault hook"
        return self.faults / namespace / name

    def clock_offset(self, namespace: str, name: str) -> Path:
        """The libfaketime offset file of this pod's sidecar (kept across the pod's re-creations)."""
        assert self.skewable_clocks, "PodRunner(skewable_clocks=True) puts the sidecars under libfaketime"
        return self.workdir / "clocks" / namespace / name / podfaults.CLOCK_OFFSET_FILE

    # -- API calls

    def _pod_kubeconfig(self, pod: dict[str, Any], path: Path) -> str:
        """The pod's own ServiceAccount, by TokenRequest bound to the pod (as kubelet projects it)."""
        meta = pod["metadata"]
        account = pod["spec"].get("serviceAccountName") or "default"
        body = {"spec": {"expirationSeconds": kubelet.TOKEN_SECONDS,
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}}}
        token = self.core.create_namespaced_service_account_token(account, meta["namespace"], body).status.token
        return str(kubeconfigs.write(path, kubeconfigs.with_token(self.admin, token, "pod")))

    def _claim_dir(self, namespace: str, claim: str) -> Path:
        """The directory of the hostPath PersistentVolume bound to `claim`, as kubelet would mount it."""
        pvc = self.core.read_namespaced_persistent_volume_claim(claim, namespace)
        if pvc.status.phase != "Bound" or not pvc.spec.volume_name:
            raise RuntimeError(f"claim {claim} is {pvc.status.phase}, not Bound")
        pv = self.core.read_persistent_volume(pvc.spec.volume_name)
        if pv.spec.host_path is None:
            raise RuntimeError(f"volume {pv.metadata.name} of claim {claim} is not a hostPath volume")
        return Path(pv.spec.host_path.path)

    def _tls_files(self, pod: dict[str, Any], ip: str) -> dict[str, bytes]:
        """The pod's projected `tls` volume, its certificates made to name `ip` (`project_tls`)."""
        namespace = pod["metadata"]["namespace"]
        secrets: dict[str, dict[str, Any]] = {}
        files = {}
        for name, item, path in tls_sources(pod):
            if name not in secrets:
                secrets[name] = self.core.read_namespaced_secret(name, namespace).data or {}
            files[path] = base64.b64decode(secrets[name][item])
        cluster = declared_env(pod)[SidecarEnv.CLUSTER]
        try:
            ca_secret = self.core.read_namespaced_secret(certificates.ca_secret_name(cluster), namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
        else:
            stored = certificates.read_secret({"data": ca_secret.data})
            if stored and stored[0] not in self._cas:
                self._cas.append(stored[0])
        return project_tls(files, self._cas, ip)

    def _warn_not_run(self, pod: dict[str, Any], reason: str) -> None:
        """A Warning Event on the pod and on its cluster: `kubectl describe` shows why nothing runs."""
        meta = pod["metadata"]
        for body in not_run_events(meta, reason, datetime.now(timezone.utc)):
            try:
                self.core.create_namespaced_event(meta["namespace"], body)
            except ApiException as exc:
                log.warning("%s: event not written: %s", meta["name"], exc)

    def _sidecar_volumes(self, pod: Mapping[str, Any], mount_root: Path) -> bool:
        """The sidecar's Secret and claim volumes (`sidecar_mounts`) under `mount_root`, at their
        mount paths; True if there were any. A claim is the directory of its bound volume, as
        for the data claim, so every pod that mounts it shares it."""
        namespace = pod["metadata"]["namespace"]
        mounted = False
        for mount in sidecar_mounts(pod):
            target = mount_root / mount.path.lstrip("/")
            if mount.secret is not None:
                try:
                    secret = self.core.read_namespaced_secret(mount.secret, namespace)
                except ApiException as exc:
                    if exc.status == 404 and mount.optional:
                        continue
                    raise
                target.mkdir(parents=True, exist_ok=True)
                data = secret.data or {}
                for key, path in mount.items if mount.items is not None else [(k, k) for k in data]:
                    if key in data:
                        (target / path).write_bytes(base64.b64decode(data[key]))
            elif mount.claim is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.exists():
                    target.symlink_to(self._claim_dir(namespace, mount.claim), target_is_directory=True)
            mounted = True
        return mounted

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

    def lose(self, namespace: str, name: str) -> None:
        """The pod's node and disk are gone for good: its processes are SIGKILLed (no preStop, no
        restart), and the next pod of that name starts on a new, empty volume, as on a new PVC."""
        key = f"{namespace}/{name}"
        self._lost.add(key)
        for worker in list(self.workers.values()):
            if worker.pod.key == key:
                worker.close()
                worker.containers.kill()

    def _delete_terminated(self, meta: Mapping[str, Any]) -> None:
        """kubelet's last word on a pod whose containers have stopped: the object deleted at once,
        with its UID as a precondition, so a pod re-created under the name is never the one deleted."""
        if FINALIZER in (meta.get("finalizers") or []):
            self._remove_finalizer(meta)
        options = k8s.V1DeleteOptions(grace_period_seconds=0, preconditions=k8s.V1Preconditions(uid=meta["uid"]))
        try:
            self.core.delete_namespaced_pod(meta["name"], meta["namespace"], body=options)
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone, or a new pod under the same name
                raise

    def release(self, pod: _Pod, *, deleted: bool) -> None:
        """The pod's processes have stopped: a `deleted` pod goes from the API now; another (the
        runner closing, a lost node) is only let go, its object left as it is."""
        meta = {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid, "finalizers": [FINALIZER]}
        try:
            if deleted:
                self._delete_terminated(meta)
            else:
                self._remove_finalizer(meta)
        except Exception as exc:  # noqa: BLE001 - a deleted pod is deleted by the next round (no worker holds it)
            log.warning("%s: not released: %s", pod.key, exc)
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
        for volume in self._small:
            podfaults.unmount(volume)
