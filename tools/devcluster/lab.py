"""The real-node lab's plan and configuration files, as pure functions of plain data.

A lab run owns a run id; every name it creates on the host (network namespaces, cgroup
roots) carries it, and its addresses come from a /14 of 10.0.0.0/8 picked for the run, so
parallel runs never collide. Every address lives only inside the run's own namespaces:

- `<prefix>-lab` holds the bridge `lab0` that joins the nodes (a veth pair per node);
- `<prefix>-n<i>` is node i: its node IP on `eth0`, its pods behind the CNI bridge `cni0`;
- the control plane runs inside the first node's namespace (the apiserver must reach each
  kubelet at its node IP, and a kubelet refuses a loopback node IP).

The I/O side is tools.devcluster.nodes.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NETNS_DIR = Path("/run/netns")
CNI_BIN_DIR = "/usr/lib/cni"
RUNC = "/usr/sbin/runc"
APISERVER_PORT = 6443
KUBELET_PORT = 10250
CLUSTER_DOMAIN = "cluster.local"
BLOCKS = 64  # /14s of 10.0.0.0/8
# kubelet with protectKernelDefaults checks these and refuses to start on a mismatch; the
# lab bind-mounts files with these values over /proc/sys inside each node's own mount
# namespace, so the host's values are never changed.
# Paths kubelet, containerd and the CNI plugins write to whatever their configuration says
# (containerd 1.6's shim sockets under /run/containerd/s, kubelet's device-plugin and
# pod-resources sockets under /var/lib/kubelet, libcni's cache in /var/lib/cni, kubelet's
# /var/log/containers links): each node mounts its own directory over them in its mount
# namespace, so nothing lands on the host, two nodes never share them, and they go with the
# run's workdir (a SIGKILLed shim's socket too).
PRIVATE_DIRS = ("/run", "/var/lib", "/var/log")
KERNEL_DEFAULTS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}


@dataclass(frozen=True)
class Node:
    index: int  # 1-based
    name: str  # the Kubernetes node name
    netns: str
    ip: str  # on eth0, inside the node's namespace
    pod_cidr: str
    cgroup_root: str  # kubelet's cgroupRoot; also holds the node's containerd and kubelet
    zone: str

    @property
    def pod_gateway(self) -> str:
        return str(ipaddress.ip_network(self.pod_cidr).network_address + 1)

    @property
    def netns_path(self) -> Path:
        return NETNS_DIR / self.netns


@dataclass(frozen=True)
class Lab:
    run_id: str
    lab_netns: str
    node_network: str  # the lab bridge's subnet: every node IP
    service_cidr: str  # outside 127/8: the `kubernetes` Service gets real endpoints
    cluster_cidr: str  # every node's pod range
    nodes: tuple[Node, ...]

    @property
    def prefix(self) -> str:
        return f"rs{self.run_id}"

    @property
    def plane_node(self) -> Node:
        return self.nodes[0]

    @property
    def first_service_ip(self) -> str:
        return str(ipaddress.ip_network(self.service_cidr).network_address + 1)

    @property
    def cluster_dns(self) -> str:
        return str(ipaddress.ip_network(self.service_cidr).network_address + 10)

    @property
    def apiserver_url(self) -> str:
        """The apiserver as every node sees it."""
        return f"https://{self.plane_node.ip}:{APISERVER_PORT}"

    @property
    def netns_names(self) -> tuple[str, ...]:
        return (self.lab_netns, *(n.netns for n in self.nodes))


def plan(run_id: str, block: int, nodes: int = 1, zones: int = 3) -> Lab:
    """The names and addresses of one run: `block` picks its /14 of 10.0.0.0/8.

    In the /14: the first /24 is the node network, the second /16 the pod ranges (a /24 per
    node), the third /16 the Service range.
    """
    if not run_id.isalnum() or len(run_id) > 8:
        raise ValueError(f"run id {run_id!r}: at most 8 letters or digits (interface and netns names stay short)")
    if not 0 <= block < BLOCKS:
        raise ValueError(f"block {block} outside 0..{BLOCKS - 1}")
    if not 1 <= nodes <= 200:
        raise ValueError(f"{nodes} nodes: 1..200")
    base = ipaddress.ip_network(f"10.{4 * block}.0.0/14")
    sixteens = list(base.subnets(new_prefix=16))
    node_network = next(sixteens[0].subnets(new_prefix=24))
    pods, services = sixteens[1], sixteens[2]
    prefix = f"rs{run_id}"
    return Lab(
        run_id=run_id,
        lab_netns=f"{prefix}-lab",
        node_network=str(node_network),
        service_cidr=str(services),
        cluster_cidr=str(pods),
        nodes=tuple(
            Node(
                index=i,
                name=f"node{i}",
                netns=f"{prefix}-n{i}",
                ip=str(node_network.network_address + 10 + i),
                pod_cidr=str(list(pods.subnets(new_prefix=24))[i]),
                cgroup_root=f"/{prefix}-n{i}",
                zone=f"zone-{chr(ord('a') + (i - 1) % zones)}",
            )
            for i in range(1, nodes + 1)
        ),
    )


def pick(nodes: int = 1, rng: random.Random | None = None, taken: frozenset[str] = frozenset()) -> Lab:
    """A plan with a fresh run id whose namespace names are not in `taken` (those on the host)."""
    rng = rng or random.SystemRandom()
    for _ in range(100):
        lab = plan(f"{rng.randrange(16 ** 6):06x}", rng.randrange(BLOCKS), nodes)
        if not set(lab.netns_names) & taken:
            return lab
    raise RuntimeError("no free run id after 100 tries")


# ---- per-node files


@dataclass(frozen=True)
class NodeDirs:
    """Where one node's state lives: all under its own directory of the run's workdir."""

    root: Path

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd.sock"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd-root"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd-state"

    @property
    def runc_root(self) -> Path:
        return self.root / "runc-root"

    @property
    def opt(self) -> Path:
        return self.root / "opt"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni-conf"

    @property
    def cni_ipam(self) -> Path:
        return self.root / "cni-ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet-root"

    @property
    def kubelet_certs(self) -> Path:
        return self.root / "kubelet-certs"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def sysctl(self) -> Path:
        return self.root / "sysctl"

    def private(self, host_dir: str) -> Path:
        """The node's own directory mounted over `host_dir` in its mount namespace."""
        return self.root / "private" / host_dir.strip("/").replace("/", "-")

    @property
    def resolv_conf(self) -> Path:
        return self.root / "resolv.conf"


def containerd_config(dirs: NodeDirs, sandbox_image: str) -> str:
    """containerd 1.6's CRI config for one node (TOML, written by hand: two levels of tables)."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    disabled = ["io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.aufs",
                "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                "io.containerd.snapshotter.v1.devmapper"]
    lines = [
        "version = 2",
        f"root = {_q(dirs.containerd_root)}",
        f"state = {_q(dirs.containerd_state)}",
        f"disabled_plugins = {json.dumps(disabled)}",
        "oom_score = 0",
        "[grpc]",
        f"  address = {_q(dirs.containerd_socket)}",
        "[ttrpc]",
        '  address = ""',
        "[debug]",
        '  address = ""',
        "[metrics]",
        '  address = ""',
        '[plugins."io.containerd.internal.v1.opt"]',
        f"  path = {_q(dirs.opt)}",
        f"[{cri}]",
        f"  sandbox_image = {_q(sandbox_image)}",
        '  stream_server_address = "127.0.0.1"',
        '  stream_server_port = "0"',
        "  enable_selinux = false",
        "  disable_apparmor = true",
        "  netns_mounts_under_state_dir = true",
        # No CAP_SYS_RESOURCE here: runc cannot lower oom_score_adj (the pause container asks
        # for -998), so every sandbox would fail; clamp it to containerd's own.
        "  restrict_oom_score_adj = true",
        "  max_container_log_line_size = 16384",
        f"[{cri}.containerd]",
        '  snapshotter = "overlayfs"',
        '  default_runtime_name = "runc"',
        f"[{cri}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{cri}.containerd.runtimes.runc.options]",
        "  SystemdCgroup = false",
        f"  BinaryName = {_q(RUNC)}",
        f"  Root = {_q(dirs.runc_root)}",
        f"[{cri}.cni]",
        f"  bin_dir = {_q(CNI_BIN_DIR)}",
        f"  conf_dir = {_q(dirs.cni_conf)}",
        "  max_conf_num = 1",
    ]
    return "\n".join(lines) + "\n"


def _q(value: object) -> str:
    return json.dumps(str(value))  # a TOML basic string is a JSON string for these values


def cni_conflist(node: Node, dirs: NodeDirs) -> dict[str, Any]:
    """A bridge over the node's pod range, no masquerade: pod IPs are routed as they are."""
    return {
        "cniVersion": "0.4.0",
        "name": "lab-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(dirs.cni_ipam),
                    "ranges": [[{"subnet": node.pod_cidr, "gateway": node.pod_gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(lab: Lab, node: Node, dirs: NodeDirs, ca_file: Path) -> dict[str, Any]:
    """KubeletConfiguration for one node of the lab."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        # Two kubelets on one host would reap each other's pod cgroups without their own root.
        "cgroupRoot": node.cgroup_root,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{dirs.containerd_socket}",
        "address": node.ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "podLogsDir": str(dirs.pod_logs),
        "resolvConf": str(dirs.resolv_conf),
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [lab.cluster_dns],
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "serializeImagePulls": False,
        # cAdvisor cannot stat the root file system here: no eviction, and locally imported
        # images must never be garbage-collected.
        "evictionHard": {},
        "evictionPressureTransitionPeriod": "0s",
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "localStorageCapacityIsolation": False,
        # Otherwise kubelet writes six global kernel tunables; with it, it checks them
        # (against the files bind-mounted in the node's mount namespace).
        "protectKernelDefaults": True,
        "makeIPTablesUtilChains": False,
        "registerNode": True,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "syncFrequency": "10s",
        "nodeStatusUpdateFrequency": "10s",
        "shutdownGracePeriod": "0s",
    }


def kubelet_args(node: Node, dirs: NodeDirs, config: Path, kubeconfig: Path) -> list[str]:
    return [
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={node.name}",
        f"--node-ip={node.ip}",
        f"--root-dir={dirs.kubelet_root}",
        f"--cert-dir={dirs.kubelet_certs}",
        f"--node-labels=topology.kubernetes.io/zone={node.zone}",
        "--v=1",
    ]


def kube_proxy_config(lab: Lab, node: Node, kubeconfig: Path) -> dict[str, Any]:
    """kube-proxy in iptables mode inside the node's namespace: its rules never reach the
    host's tables, and with the conntrack values at 0 it leaves the global ones alone."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "clusterCIDR": lab.cluster_cidr,
        "hostnameOverride": node.name,
        "bindAddress": node.ip,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "nodePortAddresses": [f"{node.ip}/32"],
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def sysctl_mounts(dirs: NodeDirs) -> list[tuple[Path, Path]]:
    """(file holding kubelet's expected value, the /proc/sys entry it covers), per tunable."""
    return [(dirs.sysctl / key.replace("/", "."), Path("/proc/sys") / key) for key in KERNEL_DEFAULTS]


def containerd_script(dirs: NodeDirs, config: Path) -> str:
    """The shell line that runs in the node's own mount namespace before containerd.

    Mounts made there (the node's private /var/lib and /var/log, the sysctl files, kubelet's
    volumes, containerd's snapshots) stay
    there: the namespace is a slave of the host's, made shared inside so that kubelet (which
    joins it) and containerd see each other's mounts. It dies with its last process.
    """
    private = [f"mount --bind {dirs.private(d)} {d}" for d in PRIVATE_DIRS]
    binds = [f"mount --bind {src} {dst}" for src, dst in sysctl_mounts(dirs)]
    return " && ".join(["mount --make-rshared /", *private, *binds, f"exec containerd --config {config}"])


def apiserver_args(lab: Lab, pki_dir: Path, etcd_url: str, workdir: Path) -> list[str]:
    """kube-apiserver inside the plane node's namespace, on its node IP."""
    node = lab.plane_node
    return [
        f"--bind-address={node.ip}",
        f"--advertise-address={node.ip}",
        f"--secure-port={APISERVER_PORT}",
        f"--etcd-servers={etcd_url}",
        f"--service-cluster-ip-range={lab.service_cidr}",
        f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
        f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
        f"--client-ca-file={pki_dir / 'ca.crt'}",
        f"--kubelet-client-certificate={pki_dir / 'admin.crt'}",
        f"--kubelet-client-key={pki_dir / 'admin.key'}",
        # Node names resolve nowhere in the lab: logs and exec go to the node IP.
        "--kubelet-preferred-address-types=InternalIP",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki_dir / 'sa.pub'}",
        f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        "--profiling=false",
        f"--cert-dir={workdir / 'apiserver'}",
    ]


def in_netns(node: Node, argv: list[str]) -> list[str]:
    """Run `argv` in the node's network namespace only (`ip netns exec` would also give it a
    mount namespace of its own, hiding mounts from the node's other processes)."""
    return ["nsenter", f"--net={node.netns_path}", "--", *argv]


def cgroup_paths(hierarchies: list[Path], root: str) -> list[Path]:
    """The node's cgroup root in every hierarchy (kubelet expects it in each v1 hierarchy)."""
    return [h / root.lstrip("/") for h in hierarchies]


def cgroup_hierarchies(mounts: str) -> list[Path]:
    """Every cgroup (v1) and cgroup2 mount point in a /proc/self/mounts text."""
    found = []
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] in ("cgroup", "cgroup2"):
            found.append(Path(fields[1]))
    return found


def bottom_up(dirs: list[str]) -> list[str]:
    """Directories in an order where every child comes before its parent (for rmdir)."""
    return sorted(dirs, key=lambda d: d.count(os.sep), reverse=True)



# ---- runs whose owner died without a teardown (SIGKILL)


def owner_record(lab: Lab, pid: int, started: int) -> dict[str, Any]:
    """What a sweep needs to find and remove a run: its owner and every name it makes on the host."""
    return {"run_id": lab.run_id, "pid": pid, "started": started, "netns": list(lab.netns_names),
            "cgroup_roots": [n.cgroup_root for n in lab.nodes]}


def process_start_time(stat: str) -> int:
    """Field 22 of a /proc/<pid>/stat text (clock ticks since boot): a pid with another start
    time is another process."""
    return int(stat.rsplit(")", 1)[1].split()[19])


def abandoned(record: dict[str, Any], start_time_of_pid: int | None) -> bool:
    """The run's owner is gone: no process has its pid, or another process does."""
    return start_time_of_pid != record["started"]
