"""The lab's cluster DNS: CoreDNS as a Deployment behind the `kube-dns` Service, and a
minimal DNS client to ask it from a node's namespace. Pure; tools.devcluster.nodes applies it.

CoreDNS answers for the cluster domain only: it forwards nothing, so nothing is dialled
outside the lab.
"""

from __future__ import annotations

import random
import struct
from typing import Any

from tools.devcluster import lab
from tools.devcluster import versions

IMAGE = f"localhost/coredns:{versions.COREDNS}"
NAMESPACE = "kube-system"
LABELS = {"k8s-app": "kube-dns"}
COREFILE = f"""\
.:53 {{
    errors
    health :8080
    ready :8181
    kubernetes {lab.CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    cache 30
    loadbalance
}}
"""


def manifests(plan: lab.Lab) -> list[dict[str, Any]]:
    """RBAC, Corefile, Deployment and the `kube-dns` Service at the kubelets' clusterDNS address."""
    meta = {"name": "coredns", "namespace": NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:coredns"},
         "rules": [
             {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
             {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": NAMESPACE}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"Corefile": COREFILE}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {**meta, "labels": LABELS},
         "spec": {
             "replicas": 1,
             "selector": {"matchLabels": LABELS},
             "template": {
                 "metadata": {"labels": LABELS},
                 "spec": {
                     "serviceAccountName": "coredns",
                     "dnsPolicy": "Default",  # its own lookups never go to itself
                     "containers": [{
                         "name": "coredns",
                         "image": IMAGE,
                         "imagePullPolicy": "Never",
                         "args": ["-conf", "/etc/coredns/Corefile"],
                         "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                   {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"}],
                         "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
                         "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
                         "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}},
                     }],
                     "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                 },
             },
         }},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": NAMESPACE, "labels": LABELS},
         "spec": {"selector": LABELS, "clusterIP": plan.cluster_dns,
                  "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}},
    ]


# ---- a DNS client for A and PTR records (RFC 1035), enough to check the lab's answers

A, PTR = 1, 12


def query(name: str, qtype: int, query_id: int | None = None) -> bytes:
    """One recursive-desired question for `name`'s records of `qtype`."""
    qid = random.randrange(1 << 16) if query_id is None else query_id
    header = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.rstrip(".").split(".")) + b"\0"
    return header + question + struct.pack("!HH", qtype, 1)


def reverse_name(ip: str) -> str:
    """The in-addr.arpa name whose PTR record names `ip`."""
    return ".".join(reversed(ip.split("."))) + ".in-addr.arpa"


def _name(message: bytes, offset: int) -> tuple[str, int]:
    """The name at `offset` (following compression pointers) and the offset after it."""
    labels: list[str] = []
    end = None
    while True:
        length = message[offset]
        if length & 0xC0 == 0xC0:
            end = offset + 2 if end is None else end
            offset = struct.unpack("!H", message[offset:offset + 2])[0] & 0x3FFF
            continue
        if length == 0:
            return ".".join(labels), (offset + 1 if end is None else end)
        labels.append(message[offset + 1:offset + 1 + length].decode())
        offset += 1 + length


def records(response: bytes, query_id: int, qtype: int) -> tuple[int, list[str]]:
    """(response code, the answers of `qtype`: addresses for A, names for PTR) of a response to
    the query with `query_id`."""
    qid, flags, questions, answers, _, _ = struct.unpack("!HHHHHH", response[:12])
    if qid != query_id or not flags & 0x8000:
        raise ValueError(f"not the response to query {query_id}")
    offset = 12
    for _ in range(questions):
        offset = _name(response, offset)[1] + 4
    found = []
    for _ in range(answers):
        offset = _name(response, offset)[1]
        rtype, _, _, length = struct.unpack("!HHIH", response[offset:offset + 10])
        offset += 10
        if rtype == qtype == A and length == 4:
            found.append(".".join(str(b) for b in response[offset:offset + 4]))
        elif rtype == qtype == PTR:
            found.append(_name(response, offset)[0])
        offset += length
    return flags & 0xF, found
