"""Kubeconfig files: one admin (client certificate), and one per ServiceAccount token."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def render(server: str, ca: Path, user: dict[str, str], name: str = "raftset-dev") -> dict:
    """A single-context kubeconfig with every credential inlined, so the file stands alone."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": _b64(ca)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def cert_user(cert: Path, key: Path) -> dict[str, str]:
    return {"client-certificate-data": _b64(cert), "client-key-data": _b64(key)}


def token_user(token: str) -> dict[str, str]:
    return {"token": token}


def with_token(admin: Mapping[str, Any], token: str, name: str) -> dict[str, Any]:
    """A kubeconfig for the server and CA of `admin`'s current context that authenticates with
    `token` only (a TokenRequest token, as kubelet projects one): the admin's own credentials stay out."""
    current = admin.get("current-context")
    context = next(c["context"] for c in admin["contexts"] if c["name"] == current)
    cluster = next(c["cluster"] for c in admin["clusters"] if c["name"] == context["cluster"])
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": dict(cluster)}],
        "users": [{"name": name, "user": token_user(token)}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def write(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
