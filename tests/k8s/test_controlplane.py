"""The apiserver-only plane: it serves the pinned release, and RBAC decides access."""

from __future__ import annotations

import ipaddress
import json
import uuid

import pytest

from tools.devcluster import Plane, versions

pytestmark = pytest.mark.k8s


def test_apiserver_reports_the_pinned_release(kube_apiserver: Plane) -> None:
    version = json.loads(kube_apiserver.kubectl("get", "--raw", "/version").stdout)
    assert version["gitVersion"] == versions.KUBERNETES


def test_apiserver_listens_on_loopback_only(kube_apiserver: Plane) -> None:
    host = kube_apiserver.url.removeprefix("https://").rsplit(":", 1)[0]
    assert ipaddress.ip_address(host).is_loopback


def test_service_ips_are_loopback(kube_apiserver: Plane) -> None:
    """No kube-proxy exists: a Service IP that anything dialled must stay on this machine."""
    svc = json.loads(kube_apiserver.kubectl("get", "service", "kubernetes", "-n", "default", "-o", "json").stdout)
    assert ipaddress.ip_address(svc["spec"]["clusterIP"]).is_loopback


def test_rbac_refuses_a_service_account_until_granted(kube_apiserver: Plane) -> None:
    ns = f"rbac-{uuid.uuid4().hex[:6]}"
    kube_apiserver.kubectl("create", "namespace", ns)
    kube_apiserver.kubectl("create", "serviceaccount", "nobody", "-n", ns)
    as_nobody = kube_apiserver.token_kubeconfig(ns, "nobody")

    refused = kube_apiserver.kubectl("get", "pods", "-n", ns, as_kubeconfig=as_nobody, check=False)
    assert refused.returncode != 0
    assert "forbidden" in refused.stderr.lower()
    assert f"system:serviceaccount:{ns}:nobody" in refused.stderr

    # The same token works once RBAC grants the verb: the refusal above was RBAC's, not a broken login.
    kube_apiserver.kubectl("create", "role", "pod-reader", "-n", ns, "--verb=list", "--resource=pods")
    kube_apiserver.kubectl("create", "rolebinding", "nobody-reads", "-n", ns, "--role=pod-reader",
                           f"--serviceaccount={ns}:nobody")
    allowed = kube_apiserver.kubectl("get", "pods", "-n", ns, as_kubeconfig=as_nobody, check=False)
    assert allowed.returncode == 0, allowed.stderr
    still_refused = kube_apiserver.kubectl("get", "secrets", "-n", ns, as_kubeconfig=as_nobody, check=False)
    assert "forbidden" in still_refused.stderr.lower()
