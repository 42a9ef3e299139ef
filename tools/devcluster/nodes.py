"""Bring up the real-node lab (tools.devcluster.lab has its plan) and tear it down.

Every process is started through a `procs.Supervisor` (own process group, killed by its
id) and every network namespace, cgroup directory and working directory made here is
recorded and removed by `Lab.stop`, which runs on an explicit stop, at exit, and after a
failed start. Processes the node runtimes start (shims, containers) are found by the node's
cgroups and killed by pid. The mounts live only in each node's own mount namespace, which
goes with its last process.

The host reaches the apiserver (inside the first node's network namespace) through a
socat pair: a loopback port on the host, a unix socket in the work directory, the
apiserver's node IP inside the namespace.

Besides the nodes: CoreDNS behind `kube-dns` (tools.devcluster.labdns), and a provisioner of
local volumes for the default StorageClass (tools.devcluster.labvolumes), a thread of this
process. A run whose owner was SIGKILLed is removed by `sweep` (at the next start).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tools.devcluster import (build, images, kubeconfig, lab, labdns, labvolumes, net, pki, plane, procs,
                              programs, shutdown, versions)

START_TIMEOUT_S = 180.0
HOST_LOOPBACK = "127.0.0.1"  # where the lab's host-side processes (cert-manager's controller) listen
INNER_KUBECONFIG = "admin-inner.kubeconfig"  # the admin's, from inside the plane node's namespace
NODE_READY_TIMEOUT_S = 180.0
CGROUP_DRAIN_S = 15.0
# What a node needs from the machine (`make realnode-deps` installs the Debian packages).
MACHINE_TOOLS = ("containerd", "ctr", "runc", "socat", "nsenter", "unshare", "ip", "setpriv", "kubectl", "iptables")

WORKDIR_PREFIX = "raftset-lab-"
# Where every run's workdir goes, whatever $TMPDIR says: kubelet and containerd bind unix sockets
# deep inside a node's directory, and a socket path must fit in 108 bytes (a test run's $TMPDIR,
# nested per xdist worker, made kubelet's pod-resources socket 110: "bind: invalid argument").
LAB_PARENT = Path("/tmp")
OWNER_RECORD = "owner.json"  # lab.owner_record: what `sweep` needs after the owner was killed

Log = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def missing_tools() -> list[str]:
    """Every machine tool the lab needs and cannot find (the lab fails naming them, never skips)."""
    missing = [tool for tool in MACHINE_TOOLS if shutil.which(tool) is None]
    if not os.access(Path(lab.CNI_BIN_DIR) / "bridge", os.X_OK):
        missing.append(f"{lab.CNI_BIN_DIR}/bridge (containernetworking-plugins)")
    return missing


def _run(*argv: str) -> str:
    result = subprocess.run(argv, text=True, capture_output=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


@dataclass
class Lab:
    """A running lab. `kubeconfig` (cluster-admin) reaches the apiserver from the host."""

    plan: lab.Lab
    workdir: Path
    supervisor: procs.Supervisor
    netns: list[str] = field(default_factory=list)  # made by this run, in order
    cgroups: list[Path] = field(default_factory=list)  # node cgroup roots made by this run
    kubeconfig: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    provisioner: Provisioner | None = None
    stopped: bool = False

    @property
    def host(self) -> str:
        return HOST_LOOPBACK

    def dirs(self, node: lab.Node) -> lab.NodeDirs:
        return lab.NodeDirs(self.workdir / node.name)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        cmd = ["kubectl", "--kubeconfig", self.kubeconfig, *args]
        result = subprocess.run(cmd, input=input, text=True, capture_output=True, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
        return result

    def ctr(self, node: lab.Node, *args: str) -> str:
        return _run("ctr", "--address", str(self.dirs(node).containerd_socket), "-n", "k8s.io", *args)

    def volume_dirs(self) -> dict[str, Path]:
        return {node.name: self.dirs(node).root / "volumes" for node in self.plan.nodes}

    def stop(self) -> list[str]:
        """Tear down everything this run made; returns what could not be removed (empty: all)."""
        if self.stopped:
            return []
        self.stopped = True
        problems: list[str] = []
        if self.provisioner is not None:
            self.provisioner.stop()
        self.supervisor.stop_all()
        for root in self.cgroups:
            problems += _remove_cgroup_tree(root)
        for name in reversed(self.netns):
            result = subprocess.run(["ip", "netns", "delete", name], capture_output=True, text=True)
            if result.returncode != 0:
                problems.append(f"netns {name}: {result.stderr.strip()}")
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self.workdir.exists():
            problems.append(f"workdir {self.workdir} remains")
        atexit.unregister(self.stop)
        return problems

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(nodes: int = 1, dns: bool = True, log: Log = _quiet) -> Lab:
    """Start the lab (building missing binaries first), with CoreDNS unless `dns` is False;
    on any failure nothing is left behind. Runs abandoned by a killed owner are swept first."""
    missing = missing_tools()
    if missing:
        raise RuntimeError(f"the real-node lab needs {', '.join(missing)}: run `make realnode-deps`")
    for run_id, problems in sweep().items():
        log(f"swept run {run_id}, abandoned by its owner" + (f": {problems}" if problems else ""))
    build.ensure_all((build.ETCD, build.KUBE, build.KUBENODE, *((build.COREDNS,) if dns else ())), log=log)
    taken = frozenset(os.listdir(lab.NETNS_DIR)) if lab.NETNS_DIR.is_dir() else frozenset()
    plan = lab.pick(nodes, taken=taken)
    workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{plan.run_id}-", dir=LAB_PARENT))
    (workdir / "logs").mkdir()
    (workdir / OWNER_RECORD).write_text(json.dumps(lab.owner_record(plan, os.getpid(), _start_time(os.getpid()) or 0)))
    run = Lab(plan=plan, workdir=workdir, supervisor=procs.Supervisor(workdir / "logs"))
    atexit.register(run.stop)
    try:
        _start(run, dns, log)
    except BaseException:
        log(f"lab start failed; logs in {workdir / 'logs'} are removed with the lab:")
        for proc in run.supervisor.procs:
            log(f"--- {proc.name}:\n{proc.tail(15)}")
        run.stop()
        raise
    return run


def serve(count: int, then: Callable[[Lab], None]) -> int:
    """The lab of `count` nodes until a stop signal (Ctrl-C, SIGTERM, SIGHUP), `then` run once it is up
    (`nodes` prints how to reach it, `make run NODES=real` installs and prints its guide); everything torn
    down and said so on the way out. 1 if a lab process died first."""
    shutdown.on_stop_signals()
    run: Lab | None = None
    try:
        run = start(count, log=print)
        then(run)
        while not run.supervisor.dead():
            time.sleep(1)
        print(f"lab process(es) exited: {[p.name for p in run.supervisor.dead()]}; "
              f"logs in {run.workdir / 'logs'} (removed with the lab)", flush=True)
        return 1
    except KeyboardInterrupt as stop:
        print(f"\nstopping ({stop})", flush=True)
        return 0
    finally:
        shutdown.shield()
        if run is not None:
            problems = run.stop()
            print("stopped: every process, namespace, cgroup and file of the lab removed" if not problems
                  else f"stopped, but: {problems}", flush=True)
        shutdown.stopped()


def _timed(run: Lab, name: str, log: Log, step: Callable[[], object]) -> None:
    t0 = time.monotonic()
    step()
    run.timings[name] = time.monotonic() - t0
    log(f"  {name}: {run.timings[name]:.1f}s")


def _start(run: Lab, dns: bool, log: Log) -> None:
    t0 = time.monotonic()
    _timed(run, "network", log, lambda: _make_network(run))
    _timed(run, "control plane", log, lambda: _start_plane(run))
    for node in run.plan.nodes:
        _timed(run, f"{node.name} runtime", log, lambda node=node: _start_node(run, node))
    names = [n.name for n in run.plan.nodes]
    _timed(run, "nodes Ready", log, lambda: procs.wait_for(
        lambda: set(names) <= ready_nodes(run), f"nodes {names} Ready", NODE_READY_TIMEOUT_S, run.supervisor.procs))
    _timed(run, "local volumes", log, lambda: _start_provisioner(run))
    _timed(run, "kube-proxy rules", log, lambda: procs.wait_for(
        lambda: all(service_rules(n) for n in run.plan.nodes), "kube-proxy's KUBE-SERVICES chain in every node",
        START_TIMEOUT_S, run.supervisor.procs))
    if dns:
        _timed(run, "CoreDNS available", log, lambda: start_dns(run))
    run.timings["total"] = time.monotonic() - t0
    log(f"lab {run.plan.run_id} up in {run.timings['total']:.1f}s: {len(names)} node(s), workdir {run.workdir}")


# ---- network


def _netns(run: Lab, name: str) -> None:
    _run("ip", "netns", "add", name)
    run.netns.append(name)
    _run("ip", "-n", name, "link", "set", "lo", "up")


def _make_network(run: Lab) -> None:
    plan = run.plan
    _netns(run, plan.lab_netns)
    _run("ip", "-n", plan.lab_netns, "link", "add", "lab0", "type", "bridge")
    _run("ip", "-n", plan.lab_netns, "link", "set", "lab0", "up")
    prefix_len = plan.node_network.split("/")[1]
    for node in plan.nodes:
        _netns(run, node.netns)
        # Created inside the lab namespace, its peer moved straight into the node's: the
        # host never holds either end.
        _run("ip", "-n", plan.lab_netns, "link", "add", f"n{node.index}", "type", "veth",
             "peer", "name", "eth0", "netns", node.netns)
        _run("ip", "-n", plan.lab_netns, "link", "set", f"n{node.index}", "master", "lab0", "up")
        _run("ip", "-n", node.netns, "addr", "add", f"{node.ip}/{prefix_len}", "dev", "eth0")
        _run("ip", "-n", node.netns, "link", "set", "eth0", "up")
        # The namespace's own forwarding switch (pods reach other nodes); the host's stays as it is.
        _run(*lab.in_netns(node, ["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]))
        # The node's own connections to Service IPs need a route before kube-proxy's OUTPUT
        # rules rewrite them (pods have their default route through cni0).
        _run("ip", "-n", node.netns, "route", "add", plan.service_cidr, "dev", "eth0")
        for other in plan.nodes:
            if other != node:
                _run("ip", "-n", node.netns, "route", "add", other.pod_cidr, "via", other.ip)


# ---- control plane, inside the first node's namespace


def _start_plane(run: Lab) -> None:
    plan, sup, node = run.plan, run.supervisor, run.plan.plane_node
    bridge_host = net.pick_block().host
    certs = pki.make_pki(run.workdir / "pki", [node.ip, plan.first_service_ip, bridge_host])
    # Inside the namespace, the admin and the controllers dial the node IP.
    inner = str(kubeconfig.write(run.workdir / INNER_KUBECONFIG, kubeconfig.render(
        plan.apiserver_url, certs.ca.cert, kubeconfig.cert_user(certs.admin.cert, certs.admin.key))))
    env = _base_env()
    etcd = sup.start("etcd", lab.in_netns(node, [
        str(build.ETCD.binary("etcd")), "--name=lab", f"--data-dir={run.workdir / 'etcd'}",
        "--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
        "--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
        "--initial-cluster=lab=http://127.0.0.1:2380", "--log-level=warn"]), env=env)
    apiserver = sup.start("kube-apiserver", lab.in_netns(node, [
        str(build.KUBE.binary("kube-apiserver")),
        *lab.apiserver_args(plan, run.workdir / "pki", "http://127.0.0.1:2379", run.workdir)]), env=env)
    sock = run.workdir / "apiserver.sock"
    inner_socat = sup.start("socat-inner", lab.in_netns(node, [
        "socat", f"UNIX-LISTEN:{sock},fork", f"TCP:{node.ip}:{lab.APISERVER_PORT}"]))
    port = net.free_port(bridge_host)
    outer_socat = sup.start("socat-outer", [
        "socat", f"TCP-LISTEN:{port},bind={bridge_host},reuseaddr,fork", f"UNIX-CONNECT:{sock}"])
    run.kubeconfig = str(kubeconfig.write(run.workdir / "admin.kubeconfig", kubeconfig.render(
        f"https://{bridge_host}:{port}", certs.ca.cert, kubeconfig.cert_user(certs.admin.cert, certs.admin.key))))
    watched = [etcd, apiserver, inner_socat, outer_socat]
    procs.wait_for(lambda: run.kubectl("get", "--raw", "/readyz", check=False, timeout=10).returncode == 0,
                   "kube-apiserver /readyz (through the socat bridge)", START_TIMEOUT_S, watched)
    common = [f"--kubeconfig={inner}", f"--authentication-kubeconfig={inner}",
              f"--authorization-kubeconfig={inner}", "--leader-elect=false", "--bind-address=127.0.0.1",
              "--profiling=false"]
    watched.append(sup.start("kube-controller-manager", lab.in_netns(node, [
        str(build.KUBE.binary("kube-controller-manager")), *common,
        f"--cert-dir={run.workdir / 'kube-controller-manager'}",
        f"--service-account-private-key-file={certs.sa_private}", f"--root-ca-file={certs.ca.cert}",
        f"--cluster-signing-cert-file={certs.ca.cert}", f"--cluster-signing-key-file={certs.ca.key}",
        f"--service-cluster-ip-range={plan.service_cidr}"]), env=env))
    watched.append(sup.start("kube-scheduler", lab.in_netns(node, [
        str(build.KUBE.binary("kube-scheduler")), *common,
        f"--cert-dir={run.workdir / 'kube-scheduler'}"]), env=env))
    procs.wait_for(lambda: run.kubectl("get", "serviceaccount", "default", check=False, timeout=10).returncode == 0,
                   "ServiceAccount default/default", START_TIMEOUT_S, watched)


def _base_env() -> dict[str, str]:
    """etcd reads ETCD_* variables as flags; Go tools read KUBECONFIG and proxies."""
    return {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}


# ---- nodes


def _cgroup_roots(node: lab.Node) -> list[Path]:
    """The node's cgroup root in every hierarchy."""
    return lab.cgroup_paths(lab.cgroup_hierarchies(Path("/proc/self/mounts").read_text()), node.cgroup_root)


def _make_cgroups(run: Lab, node: lab.Node) -> None:
    """The node's cgroup root in every hierarchy, and `runtime` under it for containerd and
    kubelet: the node's shims inherit it, so a teardown finds every process by the root."""
    roots = _cgroup_roots(node)
    run.cgroups.extend(roots)
    for root in roots:
        for path in (root, root / "runtime"):
            path.mkdir()
            _inherit_cpuset(path)


def _inherit_cpuset(path: Path) -> None:
    """A new v1 cpuset cgroup starts with no CPUs and no memory nodes: no task could join it."""
    for name in ("cpuset.cpus", "cpuset.mems"):
        if (path / name).exists() and not (path / name).read_text().strip():
            (path / name).write_text((path.parent / name).read_text())


def _join(cgroups: list[Path], pid: int) -> None:
    for cgroup in cgroups:
        (cgroup / "cgroup.procs").write_text(str(pid))


def _write_node_files(run: Lab, node: lab.Node, certs_dir: Path) -> None:
    dirs = run.dirs(node)
    for path in (dirs.root, dirs.containerd_root, dirs.containerd_state, dirs.runc_root, dirs.opt, dirs.cni_conf,
                 dirs.cni_ipam, dirs.kubelet_root, dirs.kubelet_certs, dirs.pod_logs, dirs.sysctl,
                 *(dirs.private(d) for d in lab.PRIVATE_DIRS)):
        path.mkdir(parents=True, exist_ok=True)
    for (source, _), value in zip(lab.sysctl_mounts(dirs), lab.KERNEL_DEFAULTS.values()):
        source.write_text(value + "\n")
    dirs.resolv_conf.write_text("")
    (dirs.cni_conf / "10-lab.conflist").write_text(json.dumps(lab.cni_conflist(node, dirs), indent=2))
    containerd_toml = dirs.root / "containerd.toml"
    containerd_toml.write_text(lab.containerd_config(dirs, programs.PAUSE.image))
    kubelet_yaml = dirs.root / "kubelet.yaml"
    kubelet_yaml.write_text(yaml.safe_dump(lab.kubelet_config(run.plan, node, dirs, certs_dir / "ca.crt")))
    ca = pki.KeyPair(certs_dir / "ca.crt", certs_dir / "ca.key")
    pair = pki.issue_client(ca, f"system:node:{node.name}", "system:nodes", dirs.root, "kubelet-client")
    kubeconfig.write(dirs.root / "kubelet.kubeconfig", kubeconfig.render(
        run.plan.apiserver_url, certs_dir / "ca.crt", kubeconfig.cert_user(pair.cert, pair.key)))
    # The user the default ClusterRoleBinding system:node-proxier names.
    proxy_pair = pki.issue_client(ca, "system:kube-proxy", "", dirs.root, "kube-proxy-client")
    proxy_kubeconfig = kubeconfig.write(dirs.root / "kube-proxy.kubeconfig", kubeconfig.render(
        run.plan.apiserver_url, certs_dir / "ca.crt", kubeconfig.cert_user(proxy_pair.cert, proxy_pair.key)))
    (dirs.root / "kube-proxy.yaml").write_text(
        yaml.safe_dump(lab.kube_proxy_config(run.plan, node, proxy_kubeconfig)))


def _start_node(run: Lab, node: lab.Node) -> None:
    _write_node_files(run, node, run.workdir / "pki")
    _make_cgroups(run, node)
    _run_node(run, node, first=True)


def _runtime_names(node: lab.Node) -> tuple[str, ...]:
    return tuple(f"{what}-{node.name}" for what in ("containerd", "kubelet", "kube-proxy"))


def _run_node(run: Lab, node: lab.Node, first: bool) -> None:
    """containerd, then kubelet and kube-proxy, from the node's files. The lab's images are
    imported before kubelet's first start; containerd's root keeps them after that."""
    sup, dirs = run.supervisor, run.dirs(node)
    containerd_toml, kubelet_yaml = dirs.root / "containerd.toml", dirs.root / "kubelet.yaml"
    node_kubeconfig = dirs.root / "kubelet.kubeconfig"
    runtime_cgroups = [root / "runtime" for root in _cgroup_roots(node)]
    containerd = sup.start(f"containerd-{node.name}", lab.in_netns(node, [
        "unshare", "-m", "--propagation", "slave", "--", "sh", "-c",
        lab.containerd_script(dirs, containerd_toml)]), env=_base_env())
    _join(runtime_cgroups, containerd.pid)
    procs.wait_for(lambda: run.ctr(node, "version"), f"containerd of {node.name}", START_TIMEOUT_S, [containerd])
    if first:
        import_images(run, node)
    kubelet = sup.start(f"kubelet-{node.name}", [
        "nsenter", "-t", str(containerd.pid), "-m", "-n", "--",
        str(build.KUBENODE.binary("kubelet")),
        *lab.kubelet_args(node, dirs, kubelet_yaml, node_kubeconfig)], env=_base_env())
    _join(runtime_cgroups, kubelet.pid)
    proxy = sup.start(f"kube-proxy-{node.name}", lab.in_netns(node, [
        str(build.KUBENODE.binary("kube-proxy")), f"--config={dirs.root / 'kube-proxy.yaml'}", "--v=1"]),
        env=_base_env())
    _join(runtime_cgroups, proxy.pid)


def power_off(run: Lab, node: lab.Node) -> None:
    """A power loss of the node, the plane aside: its containerd, kubelet and kube-proxy, their
    shims and the containers, all SIGKILLed; the node's mount namespace goes with them. Its
    network namespace, cgroups and files stay."""
    for proc in [p for p in run.supervisor.procs if p.name in _runtime_names(node)]:
        run.supervisor.kill(proc)
    for root in _cgroup_roots(node):
        if survivors := _kill_cgroup_tree(root):
            raise RuntimeError(f"cgroup {root}: pids {sorted(survivors)} survive SIGKILL")


def power_on(run: Lab, node: lab.Node) -> None:
    """The node's runtime started again after `power_off`, as at boot."""
    _run_node(run, node, first=False)


def start_cert_manager(run: Lab) -> procs.Proc:
    """cert-manager's controller on the host, through the apiserver bridge (plane.start_cert_manager)."""
    return plane.start_cert_manager(run)


def start_kruise(run: Lab) -> procs.Proc:
    """OpenKruise's manager in the plane node's namespace, beside the apiserver that calls its webhooks
    on that namespace's loopback (plane.start_kruise), as the admin from inside it."""
    build.ensure_all((build.KRUISE,), log=_quiet)
    node = run.plan.plane_node
    return plane.start_kruise(run, beside=lambda argv: lab.in_netns(node, argv),
                              kubeconfig=str(run.workdir / INNER_KUBECONFIG), probe=False)


def expose(run: Lab, name: str, host: str, port: int) -> str:
    """A host service (on loopback) reachable from the lab's pods at the plane node's address: a socat
    on the host from a unix socket to `host:port`, and one in the node's namespace from its address to
    that socket (the apiserver's bridge, the other way round). Returns the lab-side `ip:port`."""
    node, sock = run.plan.plane_node, run.workdir / f"{name}.sock"
    outer = run.supervisor.start(f"{name}-outer", ["socat", f"UNIX-LISTEN:{sock},fork", f"TCP:{host}:{port}"])
    procs.wait_for(sock.exists, f"{sock}", START_TIMEOUT_S, [outer])
    inner = run.supervisor.start(f"{name}-inner", lab.in_netns(node, [
        "socat", f"TCP-LISTEN:{port},bind={node.ip},reuseaddr,fork", f"UNIX-CONNECT:{sock}"]))
    listening = ["ss", "-Hltn", f"src {node.ip}:{port}"]
    procs.wait_for(lambda: bool(_run(*lab.in_netns(node, listening)).strip()), f"{name} on {node.ip}:{port}",
                   START_TIMEOUT_S, [outer, inner])
    return f"{node.ip}:{port}"


def cut_off(run: Lab, node: lab.Node, *, cut: bool = True) -> None:
    """The node's link to the lab bridge down (`cut`) or up again: nothing reaches it or leaves it,
    as a node lost to a switch or a power supply looks from the others."""
    _run("ip", "-n", run.plan.lab_netns, "link", "set", f"n{node.index}", "down" if cut else "up")


def cut_apiserver_path(run: Lab, node: lab.Node, *, cut: bool = True) -> None:
    """The node's connections to the apiserver dropped (`cut`) or let through again: its kubelet's and
    kube-proxy's, and its pods' through the `kubernetes` Service (rewritten to the apiserver's address
    before the filter). Pod-to-pod traffic flows as before: a node cut off from the API only."""
    if node == run.plan.plane_node:
        raise ValueError(f"{node.name} runs the apiserver: its path to it cannot be cut")
    rule = ["-d", run.plan.plane_node.ip, "-p", "tcp", "--dport", str(lab.APISERVER_PORT), "-j", "DROP"]
    for chain in ("OUTPUT", "FORWARD"):
        _run(*lab.in_netns(node, ["iptables", "-I" if cut else "-D", chain, *rule]))


def service_rules(node: lab.Node) -> bool:
    """kube-proxy has written its Service chain into the node's own nat table."""
    result = subprocess.run(lab.in_netns(node, ["iptables", "-t", "nat", "-S", "KUBE-SERVICES"]),
                            capture_output=True, text=True)
    return result.returncode == 0


def import_images(run: Lab, node: lab.Node) -> None:
    """The lab's tiny images (the sandbox image first) from the build cache into the node's containerd."""
    for program in (programs.PAUSE, programs.ECHO):
        run.ctr(node, "images", "import", str(programs.ensure_archive(program)))


def import_archive(run: Lab, archive: Path) -> None:
    """An OCI archive into every node's containerd, named by its index (for pods with `imagePullPolicy: Never`);
    the nodes side by side: each import mostly waits on its own containerd's unpacking."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(run.plan.nodes)) as pool:
        for done in [pool.submit(run.ctr, node, "images", "import", str(archive)) for node in run.plan.nodes]:
            done.result()


def start_dns(run: Lab) -> None:
    """CoreDNS (the cached static build, as an image) into every node, then its Deployment and
    the `kube-dns` Service; returns once it is available."""
    archive = images.cached_archive(versions.bin_root() / "images", labdns.IMAGE,
                                    {"coredns": build.COREDNS.binary("coredns")}, ["/coredns"])
    import_archive(run, archive)
    run.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(labdns.manifests(run.plan)))
    run.kubectl("rollout", "status", "-n", labdns.NAMESPACE, "deployment/coredns", f"--timeout={START_TIMEOUT_S:.0f}s",
                timeout=START_TIMEOUT_S + 10)


ASK = """
import socket, sys
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
    sock.settimeout(5)
    sock.sendto(bytes.fromhex(sys.argv[2]), (sys.argv[1], 53))
    print(sock.recv(4096).hex())
"""


def resolve(run: Lab, node: lab.Node, name: str, qtype: int = labdns.A) -> tuple[int, list[str]]:
    """(response code, records) for `name` from the cluster DNS, asked from the node's namespace."""
    query_id = random.randrange(1 << 16)
    answer = _run(*lab.in_netns(node, [sys.executable, "-c", ASK, run.plan.cluster_dns,
                                       labdns.query(name, qtype, query_id).hex()]))
    return labdns.records(bytes.fromhex(answer.strip()), query_id, qtype)


def with_cluster_dns(run: Lab, node: lab.Node, argv: list[str]) -> list[str]:
    """`argv` in the node's network namespace, resolving names as a pod does (the cluster DNS and
    its search path), through a resolv.conf bound in a mount namespace of its own: the host's
    stays as it is."""
    resolv = run.workdir / "pod-resolv.conf"
    resolv.write_text(f"nameserver {run.plan.cluster_dns}\nsearch default.svc.cluster.local svc.cluster.local"
                      " cluster.local\noptions ndots:5\n")
    return lab.in_netns(node, ["unshare", "-m", "--propagation", "private", "--", "sh", "-c",
                               f'mount --bind {resolv} /etc/resolv.conf && exec "$@"', "sh", *argv])


def ready_nodes(run: Lab) -> set[str]:
    result = run.kubectl("get", "nodes", "-o", "json", check=False, timeout=10)
    if result.returncode != 0:
        return set()
    return {n["metadata"]["name"] for n in json.loads(result.stdout)["items"]
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))}


# ---- local volumes (tools.devcluster.labvolumes)


def _items(listed: Any) -> list[dict[str, Any]]:
    """The items of a list answer left undecoded by the client (`_preload_content=False`)."""
    return json.loads(listed.data)["items"]


class Provisioner:
    """Polls claims and volumes once a second and carries out `labvolumes.actions`, in a thread
    of the tool's process; what fails is logged and tried again at the next poll. It reads and
    writes through the Python client: a kubectl process a second cost about 2 CPU-minutes per
    `make test` (ci30's process accounting: 6056 kubectl runs, 6.9 CPU-minutes), more than the lab's kubelets."""

    def __init__(self, run: Lab) -> None:
        self.run = run
        self.log = run.workdir / "logs" / "provisioner.log"
        self._core = k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=run.kubeconfig))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lab-provisioner", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 - logged; the next poll tries again
                with open(self.log, "a") as out:
                    out.write(f"{time.strftime('%H:%M:%S')} {exc}\n")

    def poll(self) -> None:
        claims = _items(self._core.list_persistent_volume_claim_for_all_namespaces(
            _preload_content=False, _request_timeout=20))
        volumes = _items(self._core.list_persistent_volume(_preload_content=False, _request_timeout=20))
        for action in labvolumes.actions(claims, volumes, self.run.volume_dirs()):
            if isinstance(action, labvolumes.Create):
                action.directory.mkdir(parents=True, exist_ok=True)
                self._core.create_persistent_volume(action.volume, _request_timeout=20)
            else:
                try:
                    self._core.delete_persistent_volume(action.name, _request_timeout=20)
                except k8s.ApiException as exc:
                    if exc.status != 404:
                        raise
                if action.directory is not None:
                    shutil.rmtree(action.directory, ignore_errors=True)


def _start_provisioner(run: Lab) -> None:
    run.kubectl("apply", "-f", "-", input=json.dumps(labvolumes.storage_class()))
    run.provisioner = Provisioner(run)
    run.provisioner.start()


# ---- teardown


def _cgroup_dirs(root: Path) -> list[str]:
    return [dirpath for dirpath, _, _ in os.walk(root)] if root.is_dir() else []


def _pids(root: Path) -> set[int]:
    pids: set[int] = set()
    for directory in _cgroup_dirs(root):
        try:
            pids |= {int(p) for p in (Path(directory) / "cgroup.procs").read_text().split()}
        except OSError:
            pass
    return pids


def _kill_cgroup_tree(root: Path) -> set[int]:
    """SIGKILL every process in the cgroup tree, by pid, until it is empty; returns the survivors."""
    deadline = time.monotonic() + CGROUP_DRAIN_S
    while (pids := _pids(root)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    return pids


def _remove_cgroup_tree(root: Path) -> list[str]:
    """SIGKILL every process left in the cgroup tree, by pid, until it is empty; then rmdir it."""
    if pids := _kill_cgroup_tree(root):
        return [f"cgroup {root}: pids {sorted(pids)} survive SIGKILL"]
    problems = []
    for directory in lab.bottom_up(_cgroup_dirs(root)):
        try:
            os.rmdir(directory)
        except OSError as exc:
            problems.append(f"cgroup {directory}: {exc}")
    return problems


def _start_time(pid: int) -> int | None:
    try:
        return lab.process_start_time(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, IndexError, ValueError):
        return None


def sweep(tmp: Path | None = None) -> dict[str, list[str]]:
    """Tear down every run under `tmp` (the temp dir) whose owner died without tearing it down
    (SIGKILL: its supervised processes died with it, its shims, containers, namespaces and
    cgroups did not). Returns each swept run id with what could not be removed."""
    swept = {}
    for record_path in sorted((tmp or LAB_PARENT).glob(f"{WORKDIR_PREFIX}*/{OWNER_RECORD}")):
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError):
            continue  # being written or removed right now
        if not lab.abandoned(record, _start_time(record["pid"])):
            continue
        problems: list[str] = []
        hierarchies = lab.cgroup_hierarchies(Path("/proc/self/mounts").read_text())
        for root in record["cgroup_roots"]:
            for path in lab.cgroup_paths(hierarchies, root):
                problems += _remove_cgroup_tree(path)
        for name in reversed(record["netns"]):
            if (lab.NETNS_DIR / name).exists():
                subprocess.run(["ip", "netns", "delete", name], capture_output=True)
        shutil.rmtree(record_path.parent, ignore_errors=True)
        swept[record["run_id"]] = problems
    return swept


def leftovers(plan: lab.Lab) -> list[str]:
    """What a run left on the host: its namespaces and cgroup roots (empty after a clean stop)."""
    found = [f"netns {name}" for name in plan.netns_names if (lab.NETNS_DIR / name).exists()]
    hierarchies = lab.cgroup_hierarchies(Path("/proc/self/mounts").read_text())
    for node in plan.nodes:
        found += [f"cgroup {p}" for p in lab.cgroup_paths(hierarchies, node.cgroup_root) if p.exists()]
    return found
