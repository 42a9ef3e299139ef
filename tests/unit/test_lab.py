"""The real-node lab's plan and rendered configuration (tools.devcluster.lab, labdns, images)."""

from __future__ import annotations

import gzip
import hashlib
import io
import ipaddress
import json
import random
import struct
import tarfile
import tomllib
from pathlib import Path

import pytest

from tools.devcluster import images, lab, labdns

pytestmark = pytest.mark.unit

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def _net(cidr: str) -> ipaddress.IPv4Network:
    return ipaddress.ip_network(cidr)


def test_every_name_of_a_run_carries_its_id() -> None:
    plan = lab.plan("ab12cd", 5, nodes=3)
    assert plan.netns_names == ("rsab12cd-lab", "rsab12cd-n1", "rsab12cd-n2", "rsab12cd-n3")
    assert [n.cgroup_root for n in plan.nodes] == ["/rsab12cd-n1", "/rsab12cd-n2", "/rsab12cd-n3"]
    assert [n.name for n in plan.nodes] == ["node1", "node2", "node3"]
    assert [n.zone for n in plan.nodes] == ["zone-a", "zone-b", "zone-c"]
    assert plan.plane_node is plan.nodes[0]


def test_addresses_stay_in_the_runs_block_and_outside_loopback() -> None:
    plan = lab.plan("ab12cd", 5, nodes=3)
    block = _net("10.20.0.0/14")
    networks = [_net(plan.node_network), _net(plan.cluster_cidr), _net(plan.service_cidr)]
    for network in networks:
        assert network.subnet_of(block) and not network.subnet_of(LOOPBACK)
    assert not any(a.overlaps(b) for i, a in enumerate(networks) for b in networks[i + 1:])
    pod_ranges = [_net(n.pod_cidr) for n in plan.nodes]
    assert all(r.subnet_of(_net(plan.cluster_cidr)) for r in pod_ranges)
    assert len({r for r in pod_ranges}) == 3 and not any(
        a.overlaps(b) for i, a in enumerate(pod_ranges) for b in pod_ranges[i + 1:])
    assert all(ipaddress.ip_address(n.ip) in _net(plan.node_network) for n in plan.nodes)
    assert len({n.ip for n in plan.nodes}) == 3
    assert [n.pod_gateway for n in plan.nodes] == [str(r.network_address + 1) for r in pod_ranges]
    assert plan.first_service_ip == "10.22.0.1" and plan.cluster_dns == "10.22.0.10"
    assert plan.apiserver_url == f"https://{plan.nodes[0].ip}:6443"


def test_two_blocks_never_overlap() -> None:
    a, b = lab.plan("a", 0), lab.plan("b", 63)
    for x in (a.node_network, a.cluster_cidr, a.service_cidr):
        for y in (b.node_network, b.cluster_cidr, b.service_cidr):
            assert not _net(x).overlaps(_net(y))


@pytest.mark.parametrize(("run_id", "block", "nodes"), [
    ("has-dash", 0, 1), ("123456789", 0, 1), ("ok", -1, 1), ("ok", 64, 1), ("ok", 0, 0), ("ok", 0, 201)])
def test_a_bad_plan_is_refused(run_id: str, block: int, nodes: int) -> None:
    with pytest.raises(ValueError):
        lab.plan(run_id, block, nodes)


def test_pick_avoids_namespaces_already_on_the_host() -> None:
    first = lab.pick(1, rng=random.Random(7))
    again = lab.pick(1, rng=random.Random(7), taken=frozenset({first.lab_netns}))
    assert again.run_id != first.run_id
    assert not set(again.netns_names) & {first.lab_netns}


DIRS = lab.NodeDirs(Path("/tmp/lab-x/node1"))


def test_containerd_clamps_oom_score_and_keeps_its_state_under_the_node() -> None:
    config = tomllib.loads(lab.containerd_config(DIRS, "localhost/pause:3.10"))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == "localhost/pause:3.10"
    assert cri["stream_server_address"] == "127.0.0.1"
    assert cri["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": str(DIRS.cni_conf), "max_conf_num": 1}
    runc = cri["containerd"]["runtimes"]["runc"]["options"]
    assert runc["SystemdCgroup"] is False and runc["Root"] == str(DIRS.runc_root)
    assert config["grpc"]["address"] == str(DIRS.containerd_socket)
    for path in (config["root"], config["state"], config["grpc"]["address"],
                 config["plugins"]["io.containerd.internal.v1.opt"]["path"]):
        assert Path(path).is_relative_to(DIRS.root)
    assert config["ttrpc"]["address"] == config["metrics"]["address"] == config["debug"]["address"] == ""


def test_kubelet_protects_kernel_defaults_in_its_own_cgroup_root_without_eviction_or_image_gc() -> None:
    plan = lab.plan("ab12cd", 5, nodes=2)
    node = plan.nodes[1]
    config = lab.kubelet_config(plan, node, DIRS, Path("/pki/ca.crt"))
    assert config["protectKernelDefaults"] is True
    assert config["cgroupRoot"] == "/rsab12cd-n2" and config["cgroupDriver"] == "cgroupfs"
    assert config["evictionHard"] == {}
    assert (config["imageGCHighThresholdPercent"], config["imageGCLowThresholdPercent"]) == (100, 99)
    assert config["address"] == node.ip and config["healthzBindAddress"] == "127.0.0.1"
    assert config["readOnlyPort"] == 0 and config["authentication"]["anonymous"]["enabled"] is False
    assert config["clusterDNS"] == [plan.cluster_dns]
    assert config["containerRuntimeEndpoint"] == f"unix://{DIRS.containerd_socket}"
    args = lab.kubelet_args(node, DIRS, Path("/k.yaml"), Path("/k.kubeconfig"))
    assert f"--node-ip={node.ip}" in args and "--hostname-override=node2" in args
    assert f"--root-dir={DIRS.kubelet_root}" in args
    assert "--node-labels=topology.kubernetes.io/zone=zone-b" in args


def test_every_tunable_kubelet_checks_is_covered_inside_the_nodes_mount_namespace_only() -> None:
    mounts = lab.sysctl_mounts(DIRS)
    assert {str(dst) for _, dst in mounts} == {
        "/proc/sys/vm/overcommit_memory", "/proc/sys/vm/panic_on_oom", "/proc/sys/kernel/panic",
        "/proc/sys/kernel/panic_on_oops", "/proc/sys/kernel/keys/root_maxkeys", "/proc/sys/kernel/keys/root_maxbytes"}
    assert all(src.parent == DIRS.sysctl for src, _ in mounts)
    script = lab.containerd_script(DIRS, Path("/c.toml"))
    steps = script.split(" && ")
    assert steps[0] == "mount --make-rshared /"
    assert steps[1:4] == [f"mount --bind {DIRS.root}/private/run /run",
                          f"mount --bind {DIRS.root}/private/var-lib /var/lib",
                          f"mount --bind {DIRS.root}/private/var-log /var/log"]
    assert steps[4:-1] == [f"mount --bind {src} {dst}" for src, dst in mounts]
    assert steps[-1] == "exec containerd --config /c.toml"


def test_the_apiserver_binds_the_plane_nodes_ip_with_node_authorization() -> None:
    plan = lab.plan("ab12cd", 5, nodes=2)
    args = lab.apiserver_args(plan, Path("/pki"), "http://127.0.0.1:2379", Path("/w"))
    assert f"--bind-address={plan.nodes[0].ip}" in args and f"--advertise-address={plan.nodes[0].ip}" in args
    assert f"--service-cluster-ip-range={plan.service_cidr}" in args
    assert "--authorization-mode=Node,RBAC" in args and "--enable-admission-plugins=NodeRestriction" in args
    assert "--kubelet-preferred-address-types=InternalIP" in args
    assert not [a for a in args if "endpoint-reconciler" in a], "the kubernetes Service needs its endpoints"
    assert not [a for a in args if "0.0.0.0" in a]


def test_the_cni_bridge_serves_the_nodes_pod_range_without_masquerade() -> None:
    node = lab.plan("ab12cd", 5, nodes=2).nodes[1]
    bridge = lab.cni_conflist(node, DIRS)["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["ipMasq"] is False and bridge["isGateway"] is True
    assert bridge["ipam"]["ranges"] == [[{"subnet": node.pod_cidr, "gateway": node.pod_gateway}]]
    assert bridge["ipam"]["dataDir"] == str(DIRS.cni_ipam)


def test_processes_enter_the_nodes_network_namespace_only() -> None:
    node = lab.plan("ab12cd", 5).nodes[0]
    assert lab.in_netns(node, ["etcd", "--x"]) == ["nsenter", "--net=/run/netns/rsab12cd-n1", "--", "etcd", "--x"]


MOUNTS = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
proc /proc proc rw 0 0
"""


def test_the_cgroup_root_is_made_in_every_hierarchy() -> None:
    hierarchies = lab.cgroup_hierarchies(MOUNTS)
    assert hierarchies == [Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup/unified")]
    assert lab.cgroup_paths(hierarchies, "/rsab-n1") == [h / "rsab-n1" for h in hierarchies]


def test_cgroups_are_removed_children_first() -> None:
    order = lab.bottom_up(["/a", "/a/b/c", "/a/b", "/a/d"])
    assert order.index("/a/b/c") < order.index("/a/b") < order.index("/a")
    assert order.index("/a/d") < order.index("/a")


def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def test_the_image_archive_is_a_named_oci_layout_whose_digests_match() -> None:
    archive = images.image_archive("localhost/pause:3.10", {"pause": b"\x7fELF binary"}, ["/pause"])
    assert archive == images.image_archive("localhost/pause:3.10", {"pause": b"\x7fELF binary"}, ["/pause"])
    files = _members(archive)
    blobs = {"sha256:" + name.rsplit("/", 1)[1]: data for name, data in files.items() if name.startswith("blobs/")}
    assert all(hashlib.sha256(data).hexdigest() == digest.split(":")[1] for digest, data in blobs.items())
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    [entry] = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"] == {"io.containerd.image.name": "localhost/pause:3.10",
                                    "org.opencontainers.image.ref.name": "3.10"}
    manifest = json.loads(blobs[entry["digest"]])
    config = json.loads(blobs[manifest["config"]["digest"]])
    assert config["config"]["Entrypoint"] == ["/pause"] and (config["os"], config["architecture"]) == ("linux", "amd64")
    [layer] = manifest["layers"]
    layer_tar = gzip.decompress(blobs[layer["digest"]])
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(layer_tar)) as tar:
        [member] = tar.getmembers()
        assert (member.name, member.mode, tar.extractfile(member).read()) == ("pause", 0o755, b"\x7fELF binary")  # type: ignore[union-attr]


def test_kube_proxy_keeps_to_the_nodes_namespace_and_the_global_conntrack_values() -> None:
    plan = lab.plan("ab12cd", 5, nodes=2)
    node = plan.nodes[1]
    config = lab.kube_proxy_config(plan, node, Path("/k.kubeconfig"))
    assert config["mode"] == "iptables" and config["clusterCIDR"] == plan.cluster_cidr
    assert config["bindAddress"] == node.ip and config["nodePortAddresses"] == [f"{node.ip}/32"]
    assert config["hostnameOverride"] == "node2"
    assert config["healthzBindAddress"].startswith("127.0.0.1:") and config["metricsBindAddress"].startswith("127.0.0.1:")
    assert config["iptables"]["localhostNodePorts"] is False  # else it sets route_localnet
    assert config["conntrack"] == {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"}


def test_the_kube_dns_service_sits_at_the_kubelets_cluster_dns_address() -> None:
    plan = lab.plan("ab12cd", 5, nodes=2)
    docs = {d["kind"]: d for d in labdns.manifests(plan)}
    assert docs["Service"]["metadata"] == {"name": "kube-dns", "namespace": "kube-system", "labels": labdns.LABELS}
    assert docs["Service"]["spec"]["clusterIP"] == plan.cluster_dns == lab.kubelet_config(
        plan, plan.nodes[0], DIRS, Path("/ca"))["clusterDNS"][0]
    template = docs["Deployment"]["spec"]["template"]
    assert template["metadata"]["labels"] == docs["Service"]["spec"]["selector"]
    [container] = template["spec"]["containers"]
    assert container["image"] == labdns.IMAGE and container["imagePullPolicy"] == "Never"
    assert "forward" not in docs["ConfigMap"]["data"]["Corefile"], "nothing is dialled outside the lab"
    assert docs["ClusterRoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": template["spec"]["serviceAccountName"], "namespace": "kube-system"}]


def test_a_query_and_its_answer_round_trip() -> None:
    query = labdns.query("kubernetes.default.svc.cluster.local", labdns.A, 0x1234)
    assert query[:4] == b"\x12\x34\x01\x00"
    assert b"\x0akubernetes\x07default\x03svc\x07cluster\x05local\x00\x00\x01\x00\x01" in query
    # The server's answer: the question echoed, then one A record whose name is a pointer to it.
    answer = (b"\x12\x34\x85\x00" + b"\x00\x01\x00\x01\x00\x00\x00\x00" + query[12:]
              + b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x1e\x00\x04" + bytes([10, 22, 0, 1]))
    assert labdns.records(answer, 0x1234, labdns.A) == (0, ["10.22.0.1"])
    assert labdns.records(answer, 0x1234, labdns.PTR) == (0, [])
    nxdomain = b"\x12\x34\x85\x03" + b"\x00\x01\x00\x00\x00\x00\x00\x00" + query[12:]
    assert labdns.records(nxdomain, 0x1234, labdns.A) == (3, [])
    with pytest.raises(ValueError):
        labdns.records(answer, 0x4321, labdns.A)
    with pytest.raises(ValueError):
        labdns.records(query, 0x1234, labdns.A)  # a query is no response


def test_a_reverse_answer_names_the_pod_through_compression_pointers() -> None:
    assert labdns.reverse_name("10.9.2.7") == "7.2.9.10.in-addr.arpa"
    query = labdns.query(labdns.reverse_name("10.9.2.7"), labdns.PTR, 7)
    assert query.endswith(b"\x00\x00\x0c\x00\x01")
    question = query[12:]
    # Two PTR answers, each named by a pointer to the question (offset 12); the second's data
    # ends in a pointer to "echo.default..." inside the first's.
    first = b"\x06echo-0\x04echo\x07default\x03svc\x07cluster\x05local\x00"
    record_head = b"\xc0\x0c\x00\x0c\x00\x01\x00\x00\x00\x1e"
    first_data_at = 12 + len(question) + len(record_head) + 2
    second = b"\x06echo-1" + struct.pack("!H", 0xC000 | (first_data_at + 7))  # past "\x06echo-0"
    answer = (struct.pack("!HHHHHH", 7, 0x8500, 1, 2, 0, 0) + question
              + record_head + struct.pack("!H", len(first)) + first
              + record_head + struct.pack("!H", len(second)) + second)
    assert labdns.records(answer, 7, labdns.PTR) == (
        0, ["echo-0.echo.default.svc.cluster.local", "echo-1.echo.default.svc.cluster.local"])
