"""A pod's life without kubelet: real etcd and real sidecar processes on loopback.

Each `Pod` is started the way a kubelet starts a pod with a native sidecar: the sidecar
process first, then, once its `GET /startup` answers 200, the store process with
`engine.command()`. The Kubernetes side (workload object, pod objects, Leases) lives in a
real kube-apiserver with no controllers: the test itself creates, marks and deletes the
pod objects (a finalizer keeps a deleted pod around with its deletionTimestamp set, as a
terminating pod is).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from raftset import contract, engines
from raftset.contract import SidecarEnv
from raftset.etcdclient import ClientTLS, EtcdClientError, Member, MemberClient, Status
from raftset.membership import RaftMembership, parse_membership
from tests.harness.waiting import await_for, wait_for

FINALIZER = "raftset.dev/test-hold"
PYTHON = sys.executable


def http_get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback only
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def http_post(url: str, timeout: float = 60.0) -> tuple[int, str]:
    req = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback only
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _stop(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@dataclass
class Pod:
    """One member's pod: its sidecar process, its store process, its directories."""

    lab: Lab
    ordinal: int
    sidecar: subprocess.Popen[bytes] | None = None
    store: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    env_extra: dict[str, str] = field(default_factory=dict)

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
            SidecarEnv.ENGINE: "etcd",
            SidecarEnv.WORKLOAD_KIND: "StatefulSet",
            # Loopback stand-ins for the pods' DNS names: 127.a.b.(10 + ordinal).
            SidecarEnv.PEER_URL_TEMPLATE: f"http://{lab.prefix}.1{{ordinal}}:2380",
            SidecarEnv.CLIENT_URL_TEMPLATE: f"http://{lab.prefix}.1{{ordinal}}:2379",
            SidecarEnv.LISTEN_PEER_URL: f"http://{self.ip}:2380",
            SidecarEnv.LISTEN_CLIENT_URL: f"http://{self.ip}:2379",
            SidecarEnv.HTTP_ADDRESS: f"{self.ip}:{lab.http_port}",
            SidecarEnv.DATA_DIR: str(self.data_dir),
            SidecarEnv.RUN_DIR: str(self.run_dir),
            SidecarEnv.TLS_DIR: lab.tls_dir or "",
            SidecarEnv.POLL_INTERVAL: "0.5",
            SidecarEnv.HEARTBEAT_INTERVAL: "5",
            SidecarEnv.CLEAN_INTERVAL: "1",
            SidecarEnv.CLEAN_GRACE: str(lab.clean_grace),
            SidecarEnv.LEAVE_TIMEOUT: "30",
            SidecarEnv.LOG_LEVEL: "INFO",
            # Fast elections keep the tier short; the same flags a user would pass.
            SidecarEnv.OPTIONS: json.dumps({"heartbeat-interval": "50", "election-timeout": "500"}),
            "PYTHONUNBUFFERED": "1",
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
        assert self.sidecar is None or self.sidecar.poll() is not None, f"{self.name}: sidecar already running"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        # The run dir is an emptyDir: a new pod starts without the old startup file.
        for stale in self.run_dir.iterdir():
            stale.unlink()
        log = open(self.sidecar_log, "ab")  # noqa: SIM115 - owned by the child
        self.sidecar = subprocess.Popen(
            [PYTHON, "-m", "raftset.sidecar"], env=self.env(), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def startup_ok(self) -> bool:
        try:
            return http_get(f"{self.sidecar_url}/startup", timeout=1)[0] == 200
        except OSError:
            return False

    def wait_startup(self, timeout: float = 30.0) -> None:
        def ok() -> bool:
            if self.sidecar is not None and self.sidecar.poll() is not None:
                raise AssertionError(f"{self.name}: sidecar exited {self.sidecar.returncode}:\n{self.log_tail()}")
            return self.startup_ok()
        wait_for(ok, timeout, f"{self.name} /startup")

    def start_store(self) -> None:
        assert self.store is None or self.store.poll() is not None, f"{self.name}: store already running"
        cmd = engines.ETCD.command(str(self.run_dir))
        log = open(self.store_log, "ab")  # noqa: SIM115
        self.store = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def start(self, timeout: float = 30.0) -> None:
        """kubelet: sidecar, startupProbe, then the store."""
        self.lab.create_pod(self.ordinal)
        self.start_sidecar()
        self.wait_startup(timeout)
        self.start_store()

    def ready(self) -> bool:
        try:
            return http_get(f"{self.sidecar_url}/readyz", timeout=1)[0] == 200
        except OSError:
            return False

    def wait_ready(self, timeout: float = 40.0) -> None:
        wait_for(self.ready, timeout, f"{self.name} /readyz (voting member serving)")

    def heartbeat(self) -> dict[str, Any]:
        return json.loads(http_get(f"{self.sidecar_url}/heartbeat")[1])

    def leave(self) -> dict[str, Any]:
        status, body = http_post(f"{self.sidecar_url}/leave")
        assert status == 200, f"{self.name}: /leave {status}: {body}"
        return json.loads(body)

    def terminate(self) -> dict[str, Any] | None:
        """kubelet's termination path: preStop (POST /leave), SIGTERM the store, then the sidecar."""
        self.lab.delete_pod(self.ordinal)
        result = self.leave()
        _stop(self.store)
        _stop(self.sidecar)
        self.lab.release_pod(self.ordinal)
        return result

    def kill(self) -> None:
        _stop(self.store, signal.SIGKILL)
        _stop(self.sidecar, signal.SIGKILL)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def log_text(self) -> str:
        return self.sidecar_log.read_text() if self.sidecar_log.exists() else ""

    def marker(self) -> dict[str, Any]:
        return json.loads((self.data_dir.parent / "data.member.json").read_text())


class Lab:
    """One test's cluster: a namespace, a workload object, pods on 127.x loopback."""

    def __init__(self, kubeconfig: str, workdir: Path, *, replicas: int, clean_grace: float = 3.0,
                 tls_dir: str | None = None, env_extra: dict[str, str] | None = None) -> None:
        self.kubeconfig = kubeconfig
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

    async def members(self, *ordinals: int) -> list[Member]:
        urls = [self.pod(o).client_url for o in (ordinals or sorted(self.pods))]
        last: Exception | None = None
        for url in urls:
            try:
                async with MemberClient(url, self.client_tls(), timeout=3) as c:
                    return await c.member_list()
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
            return False
        await await_for(moved, timeout, f"leadership on ordinal {ordinal}")

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
        return "\n".join(f"--- {p.name} sidecar\n{p.log_tail(30)}" for p in self.pods.values())
