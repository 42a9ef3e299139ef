"""A pod's life step by step: real etcd and real sidecar processes on loopback.

Each `Pod`'s containers are the stand-in kubelet's (`tools.devcluster.kubelet`, the same
one `make run` uses): the sidecar process first, then, once its `GET /startup` answers
200, the store process with `engine.command()`; a test may also take one step alone. The Kubernetes side (workload object, pod objects, Leases) lives in a
real kube-apiserver with no controllers: the test itself creates, marks and deletes the
pod objects (a finalizer keeps a deleted pod around with its deletionTimestamp set, as a
terminating pod is).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families

from raftset import contract, engines
from raftset.contract import SidecarEnv
from raftset.sidecar.io.etcdclient import ClientTLS, EtcdClientError, Member, MemberClient, Status
from tests.harness.engines import DEFAULT, EngineUnderTest
from raftset.membership import RaftMembership, parse_membership
from raftset.sidecar.pure.config import Naming
from tests.harness.waiting import await_for, wait_for
from tools.devcluster import kubelet, procs

FINALIZER = "raftset.dev/test-hold"


def tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


def http_get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    return kubelet.http_get(url, timeout)


@dataclass
class Pod:
    """One member's pod: its sidecar process, its store process, its directories."""

    lab: Lab
    ordinal: int
    env_extra: dict[str, str] = field(default_factory=dict)
    # The build this pod runs from its next start, where it differs from the lab's (an upgrade's roll).
    build: EngineUnderTest | None = None
    _containers: kubelet.MemberContainers | None = None

    @property
    def engine(self) -> EngineUnderTest:
        return self.build or self.lab.engine

    @property
    def containers(self) -> kubelet.MemberContainers:
        """The stand-in kubelet's containers of this pod, made with the environment as it is now."""
        if self._containers is None:
            self.root.mkdir(parents=True, exist_ok=True)
            self._containers = kubelet.MemberContainers(
                procs.Supervisor(self.root), "", self.lab.engine.engine, run_dir=self.run_dir,
                sidecar_url=self.sidecar_url, sidecar_env=self.env(), store_env=self.store_env(),
                client_address=(self.ip, 2379))
        return self._containers

    @property
    def sidecar(self) -> subprocess.Popen[bytes] | None:
        proc = self._containers.sidecar if self._containers else None
        return proc.popen if proc else None

    @property
    def store(self) -> subprocess.Popen[bytes] | None:
        proc = self._containers.store if self._containers else None
        return proc.popen if proc else None

    @property
    def name(self) -> str:
        return contract.pod_name(self.lab.cluster, self.ordinal)

    @property
    def ip(self) -> str:
        return self.lab.ip(self.ordinal)

    @property
    def root(self) -> Path:
        return self.lab.workdir / self.name

    @property
    def data_dir(self) -> Path:
        return self.root / "volume" / "data"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def sidecar_url(self) -> str:
        return f"http://{self.ip}:{self.lab.http_port}"

    @property
    def client_url(self) -> str:
        return f"{self.lab.scheme}://{self.ip}:2379"

    def env(self) -> dict[str, str]:
        lab = self.lab
        env = {
            **{k: v for k, v in os.environ.items() if k not in set(SidecarEnv)},
            "KUBECONFIG": lab.kubeconfig,
            SidecarEnv.POD_NAME: self.name,
            SidecarEnv.NAMESPACE: lab.namespace,
            SidecarEnv.CLUSTER: lab.cluster,
            SidecarEnv.ENGINE: lab.engine.engine.name,
            SidecarEnv.WORKLOAD_KIND: "StatefulSet",
            # Loopback stand-ins for the pods' DNS names: 127.a.b.(10 + ordinal).
            SidecarEnv.PEER_URL_TEMPLATE: lab.naming.peer_template,
            SidecarEnv.CLIENT_URL_TEMPLATE: lab.naming.client_template,
            SidecarEnv.LISTEN_PEER_URL: f"http://{self.ip}:2380",
            SidecarEnv.LISTEN_CLIENT_URL: f"http://{self.ip}:2379",
            SidecarEnv.HTTP_ADDRESS: f"{self.ip}:{lab.http_port}",
            SidecarEnv.DATA_DIR: str(self.data_dir),
            SidecarEnv.RUN_DIR: str(self.run_dir),
            SidecarEnv.TLS_DIR: lab.tls_dir or "",
            # The store's scratch path is the host's own (/tmp): a process on the host writes there.
            SidecarEnv.SCRATCH_DIR: scratch.path if (scratch := lab.engine.engine.scratch) else "",
            SidecarEnv.POLL_INTERVAL: "0.5",
            SidecarEnv.HEARTBEAT_INTERVAL: "5",
            SidecarEnv.CLEAN_INTERVAL: "1",
            SidecarEnv.CLEAN_GRACE: str(lab.clean_grace),
            SidecarEnv.LEAVE_TIMEOUT: "30",
            SidecarEnv.LOG_LEVEL: "INFO",
            SidecarEnv.OPTIONS: self.engine.options_json,
            "PYTHONUNBUFFERED": "1",
            **contract.SIDECAR_PROCESS_ENV,  # as the operator renders it
            # The engine's tools (etcdutl, for a restore) as the sidecar image carries them.
            "PATH": f"{self.engine.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        env.update(lab.env_extra)
        env.update(self.env_extra)
        return env

    @property
    def sidecar_log(self) -> Path:
        return self.root / "sidecar.log"

    @property
    def store_log(self) -> Path:
        return self.root / "store.log"

    def start_sidecar(self) -> None:
        """A new pod's sidecar: the run dir is the new pod's emptyDir, so it starts empty (no old
        startup file). A container restart within the pod keeps it: `restart_sidecar`."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for stale in self.run_dir.iterdir():
            stale.unlink()
        self._start_sidecar_container()

    def restart_sidecar(self, grace: float = 10.0) -> None:
        """kubelet restarting the sidecar container (after its livenessProbe failed): SIGTERM
        within `grace`, then a new process in the same pod, whose emptyDir outlives the container."""
        sidecar = self.containers.sidecar
        if sidecar is not None:
            self.containers.supervisor.stop(sidecar, grace_s=grace)
        self._start_sidecar_container()

    def _start_sidecar_container(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        # env_extra and the build may have changed since the last start
        self.containers.sidecar_env = self.env()
        self.containers.store_env = self.store_env()
        self.containers.start_sidecar()

    def startup_ok(self) -> bool:
        return self.containers.startup_ok()

    def wait_startup(self, timeout: float = 30.0) -> None:
        def ok() -> bool:
            if self.sidecar is not None and self.sidecar.poll() is not None:
                raise AssertionError(f"{self.name}: sidecar exited {self.sidecar.returncode}:\n{self.log_tail()}")
            return self.startup_ok()
        wait_for(ok, timeout, f"{self.name} /startup")

    def store_env(self) -> dict[str, str]:
        """The engine's command names its binary: the chosen build comes first on PATH."""
        return {**os.environ, "PATH": f"{self.engine.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}

    def start_store(self) -> None:
        self.containers.start_store()

    def start(self, timeout: float = 30.0) -> None:
        """kubelet: sidecar, startupProbe, then the store."""
        self.lab.create_pod(self.ordinal)
        self.start_sidecar()
        self.wait_startup(timeout)
        self.start_store()

    def ready(self) -> bool:
        return self.containers.ready()

    def report_exit(self, restart_count: int, exit_code: int) -> None:
        """kubelet's pod status after the store exited: waiting to restart, with its last words."""
        tail = self.store_log.read_bytes()[-2048:].decode(errors="replace") if self.store_log.exists() else ""
        engine = self.lab.engine.engine.name
        status = {"containerStatuses": [{
            "name": engine, "image": engine, "imageID": "", "ready": False, "restartCount": restart_count,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": exit_code, "reason": "Error", "message": tail}},
        }]}
        self.lab.core.patch_namespaced_pod_status(self.name, self.lab.namespace, {"status": status})

    async def restart_always(self, stop: asyncio.Event, interval: float = 0.3) -> int:
        """kubelet's restartPolicy Always for the store, until `stop`: start it again after it exits.

        Like kubelet it reports each exit in the pod's status: the store container's
        restartCount and its last termination, whose message is the end of the store's log
        (terminationMessagePolicy FallbackToLogsOnError: at most 2048 bytes). It waits for the
        sidecar's startup file (`/startup` 200) before a start, where kubelet would retry a
        failing start with backoff. Runs on the test's event loop, in the main thread: a process
        started from a short-lived thread dies with it (PR_SET_PDEATHSIG).
        Returns how many times it restarted the store.
        """
        restarts = 0
        reported: subprocess.Popen[bytes] | None = None
        liveness = kubelet.ProbeState.liveness(time.monotonic())
        while not stop.is_set():
            liveness = await asyncio.to_thread(self.containers.probe_liveness, "store", kubelet.STORE_LIVENESS,
                                               liveness, time.monotonic())
            store = self.store
            if store is not None and store.poll() is not None and store is not reported:
                self.report_exit(restarts + 1, store.returncode)
                reported = store
            if store is not None and store.poll() is not None and await asyncio.to_thread(self.startup_ok):
                self.start_store()
                restarts += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
        return restarts

    def wait_ready(self, timeout: float = 40.0) -> None:
        wait_for(self.ready, timeout, f"{self.name} /readyz (voting member serving)")

    def heartbeat(self) -> dict[str, Any]:
        return json.loads(http_get(f"{self.sidecar_url}/heartbeat")[1])

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """The sidecar's /metrics, one value per (sample name, its labels sorted)."""
        text = http_get(f"{self.sidecar_url}/metrics")[1]
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(text) for s in f.samples}

    def rounds(self, loop: str) -> int:
        """How many rounds the sidecar's `loop` has finished (its /livez; a 503 body says it too)."""
        return int(json.loads(http_get(f"{self.sidecar_url}/livez")[1])["loops"][loop]["rounds"])

    def leave(self) -> dict[str, Any]:
        status, body = self.containers.pre_stop(timeout=60.0)
        assert status == 200, f"{self.name}: /leave {status}: {body}"
        return json.loads(body)

    def terminate(self) -> dict[str, Any] | None:
        """kubelet's termination path: preStop (GET /leave), SIGTERM the store, then the sidecar."""
        self.lab.delete_pod(self.ordinal)
        result = self.leave()
        self.containers.stop(grace=20.0)
        self.lab.release_pod(self.ordinal)
        return result

    def kill(self) -> None:
        if self._containers is not None:
            self._containers.kill()

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_text(), lines)

    def log_text(self) -> str:
        return self.sidecar_log.read_text() if self.sidecar_log.exists() else ""

    def store_log_text(self) -> str:
        return self.store_log.read_text(errors="replace") if self.store_log.exists() else ""

    def store_log_tail(self, lines: int = 40) -> str:
        return tail(self.store_log_text(), lines)

    def marker(self) -> dict[str, Any]:
        return json.loads((self.data_dir.parent / "data.member.json").read_text())


class Lab:
    """One test's cluster: a namespace, a workload object, pods on 127.x loopback."""

    def __init__(self, kubeconfig: str, workdir: Path, *, replicas: int, clean_grace: float = 3.0,
                 tls_dir: str | None = None, env_extra: dict[str, str] | None = None,
                 engine: EngineUnderTest = DEFAULT) -> None:
        self.kubeconfig = kubeconfig
        self.engine = engine
        self.workdir = workdir
        rng = random.SystemRandom()
        self.prefix = f"127.{rng.randrange(192, 255)}.{rng.randrange(0, 256)}"
        self.cluster = "demo"
        self.namespace = f"etcd-{rng.randrange(16**6):06x}"
        self.http_port = 18080
        self.clean_grace = clean_grace
        self.tls_dir = tls_dir
        self.env_extra = env_extra or {}
        self.pods: dict[int, Pod] = {}
        api = k8s_config.new_client_from_config(config_file=kubeconfig)
        self.core = k8s.CoreV1Api(api)
        self.apps = k8s.AppsV1Api(api)
        self.coordination = k8s.CoordinationV1Api(api)
        self.core.create_namespace({"metadata": {"name": self.namespace}})
        # No controller-manager: the service-account admission needs "default" to exist.
        self.core.create_namespaced_service_account(self.namespace, {"metadata": {"name": "default"}})
        self.apps.create_namespaced_stateful_set(self.namespace, self._statefulset(replicas))

    @property
    def scheme(self) -> str:
        return "https" if self.tls_dir else "http"

    def ip(self, ordinal: int) -> str:
        return f"{self.prefix}.1{ordinal}"  # the same as the URL templates

    @property
    def naming(self) -> Naming:
        """The sidecars' naming (their URL templates: loopback stand-ins for the pods' DNS names)."""
        return Naming(cluster=self.cluster, namespace=self.namespace,
                      peer_template=f"http://{self.prefix}.1{{ordinal}}:2380",
                      client_template=f"http://{self.prefix}.1{{ordinal}}:2379", tls=bool(self.tls_dir))

    def client_tls(self) -> ClientTLS | None:
        return ClientTLS.load(engines.TLSFiles.under(self.tls_dir)) if self.tls_dir else None

    def _statefulset(self, replicas: int) -> dict[str, Any]:
        labels = contract.selector_labels(self.cluster)
        return {
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": self.cluster, "labels": labels},
            "spec": {
                "replicas": replicas, "serviceName": contract.peer_service_name(self.cluster),
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels},
                             "spec": {"containers": [{"name": "etcd", "image": "etcd"}]}},
            },
        }

    def scale(self, replicas: int) -> None:
        self.apps.patch_namespaced_stateful_set(self.cluster, self.namespace, {"spec": {"replicas": replicas}})

    def pod(self, ordinal: int) -> Pod:
        if ordinal not in self.pods:
            self.pods[ordinal] = Pod(self, ordinal)
        return self.pods[ordinal]

    def create_pod(self, ordinal: int, annotations: dict[str, str] | None = None) -> None:
        name = contract.pod_name(self.cluster, ordinal)
        body = {
            "metadata": {"name": name, "labels": contract.selector_labels(self.cluster),
                         "finalizers": [FINALIZER], "annotations": annotations or {}},
            "spec": {"containers": [{"name": "etcd", "image": "etcd"}]},
        }
        try:
            self.core.create_namespaced_pod(self.namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise

    def annotate_pod(self, ordinal: int, annotations: dict[str, str | None]) -> None:
        name = contract.pod_name(self.cluster, ordinal)
        self.core.patch_namespaced_pod(name, self.namespace, {"metadata": {"annotations": annotations}})

    def delete_pod(self, ordinal: int) -> None:
        """Marks the pod terminating (deletionTimestamp) while the finalizer holds it."""
        name = contract.pod_name(self.cluster, ordinal)
        self.core.delete_namespaced_pod(name, self.namespace)

    def release_pod(self, ordinal: int) -> None:
        name = contract.pod_name(self.cluster, ordinal)
        try:
            self.core.patch_namespaced_pod(name, self.namespace, {"metadata": {"finalizers": None}})
        except ApiException as exc:
            if exc.status != 404:
                raise
        wait_for(lambda: self._pod_gone(name), 10, f"pod {name} gone")

    def _pod_gone(self, name: str) -> bool:
        try:
            self.core.read_namespaced_pod(name, self.namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    def pod_object(self, ordinal: int) -> Any:
        return self.core.read_namespaced_pod(contract.pod_name(self.cluster, ordinal), self.namespace)

    def leases(self) -> dict[str, Any]:
        items = self.coordination.list_namespaced_lease(
            self.namespace, label_selector=f"{contract.LABEL_HEARTBEAT}=true").items
        return {lease.spec.holder_identity: lease for lease in items}

    def membership(self) -> RaftMembership | None:
        """The Raft membership the leader's sidecar published, None while there is none."""
        try:
            lease = self.coordination.read_namespaced_lease(contract.membership_lease_name(self.cluster),
                                                            self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return parse_membership((lease.metadata.annotations or {}).get(contract.ANNOTATION_MEMBERSHIP))

    async def members(self, *ordinals: int, linearizable: bool | None = None) -> list[Member]:
        """MemberList as the sidecars read it; `linearizable=False` reads a member's own view, which
        needs no quorum.

        By default linearizable where the engine answers it (not Xline: see Capabilities). Where the
        engine loses joined members' names (Capabilities.keeps_joined_names), a voter listed without
        one is read as the pod its peer URL belongs to, as the sidecar reads it."""
        capabilities = self.engine.engine.capabilities
        if linearizable is None:
            linearizable = capabilities.linearizable_member_list
        lost_names = None if capabilities.keeps_joined_names else self.naming.advertised
        urls = [self.pod(o).client_url for o in (ordinals or sorted(self.pods))]
        last: Exception | None = None
        for url in urls:
            try:
                async with MemberClient(url, self.client_tls(), timeout=3, lost_names=lost_names) as c:
                    return await c.member_list(linearizable=linearizable)
            except EtcdClientError as exc:
                last = exc
        raise AssertionError(f"no member answered MemberList: {last}")

    async def status(self, ordinal: int) -> Status:
        async with MemberClient(self.pod(ordinal).client_url, self.client_tls(), timeout=3) as c:
            return await c.status()

    async def leader_ordinal(self, *ordinals: int) -> int | None:
        for o in ordinals or sorted(self.pods):
            try:
                st = await self.status(o)
            except EtcdClientError:
                continue
            if st.is_leader:
                return o
        return None

    async def wait_voting(self, count: int, timeout: float = 60.0, *ordinals: int) -> list[Member]:
        async def check() -> list[Member] | None:
            members = await self.members(*ordinals)
            voting = [m for m in members if m.started and not m.is_learner]
            return members if len(voting) == count and len(members) == count else None
        return await await_for(check, timeout, f"{count} voting members")

    async def move_leader_to(self, ordinal: int, timeout: float = 20.0) -> None:
        target = (await self.status(ordinal)).member_id

        async def moved() -> bool:
            leader = await self.leader_ordinal()
            if leader == ordinal:
                return True
            if leader is not None:
                async with MemberClient(self.pod(leader).client_url, self.client_tls(), timeout=5) as c:
                    await c.move_leader(target)
                # One MoveLeader, then time to settle: back-to-back ones broke Xline clusters.
                with contextlib.suppress(AssertionError):
                    await await_for(self._leads(ordinal), 5, f"leadership on ordinal {ordinal}")
                    return True
            return False
        await await_for(moved, timeout, f"leadership on ordinal {ordinal}")

    def _leads(self, ordinal: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return await self.leader_ordinal() == ordinal
        return check

    async def rounds_pass(self, loop: str, ordinals: Sequence[int], count: int = 2, timeout: float = 60.0) -> None:
        """Wait until `loop` finished `count` more rounds on each of `ordinals`: a test that then asserts
        that nothing happened knows the decision under test was taken (at least one whole round began
        after this call), not merely that time passed on a slow machine."""
        start = {o: self.pod(o).rounds(loop) for o in ordinals}

        async def passed() -> bool:
            return all(self.pod(o).rounds(loop) >= n + count for o, n in start.items())
        await await_for(passed, timeout, f"{count} more {loop} rounds on {sorted(start)}")

    async def logged(self, text: str, *ordinals: int, timeout: float = 10.0) -> int:
        """The first of these pods (default: all) whose sidecar logged `text`.

        A sidecar logs an RPC's outcome after the RPC: a test that saw the effect
        through etcd waits for the line instead of racing the sidecar's log write.
        """
        candidates = ordinals or tuple(sorted(self.pods))

        async def find() -> Pod | None:  # a Pod, not an ordinal: ordinal 0 is falsy
            return next((self.pod(o) for o in candidates if text in self.pod(o).log_text()), None)

        found = await await_for(find, timeout, f"{text!r} in the sidecar log of ordinal(s) {candidates}")
        return found.ordinal

    async def put(self, key: str, value: str, *ordinals: int) -> None:
        async with MemberClient(self.pod(ordinals[0] if ordinals else 0).client_url, self.client_tls()) as c:
            await c.put(key, value)

    async def revision(self, ordinal: int, *, serializable: bool = False) -> int:
        """The cluster's current revision, read linearizably through `ordinal`; with `serializable`,
        the revision that member has applied."""
        async with MemberClient(self.pod(ordinal).client_url, self.client_tls()) as c:
            return await c.revision(serializable=serializable)

    async def get(self, key: str, ordinal: int, serializable: bool = True) -> bytes | None:
        async with MemberClient(self.pod(ordinal).client_url, self.client_tls()) as c:
            return await c.get(key, serializable=serializable)

    def close(self) -> None:
        for pod in self.pods.values():
            pod.kill()
        try:
            self.core.delete_namespace(self.namespace)
        except ApiException:
            pass

    def logs(self) -> str:
        """What a failed test prints: each pod's sidecar log and its store's, both tails."""
        return "\n".join(f"--- {p.name} sidecar\n{p.log_tail(30)}\n--- {p.name} store\n{p.store_log_tail(30)}"
                         for p in self.pods.values())
