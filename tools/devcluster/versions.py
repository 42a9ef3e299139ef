"""Pinned versions of every control-plane component, and where their builds are cached.

The Go wrapper modules under `go/` pin the exact dependency graph (go.mod + go.sum);
the versions here name the cache directories and the version stamps.
"""

from __future__ import annotations

import os
from pathlib import Path

KUBERNETES = "v1.32.10"
KRUISE = "v1.9.0"
KWOK = "v0.7.0"
# The S3-compatible object store for backup/restore tests and `make run` (posix backend).
VERSITYGW = "v1.8.0"
# The newest Toxiproxy the module proxy serves (latency and partitions between members).
TOXIPROXY = "v2.5.0"
# github.com/prometheus/prometheus v0.316.0 is Prometheus 3.16.0 (its VERSION file): promtool.
PROMETHEUS = "v0.316.0"
# The linearizability checker's porcupine; names the cache directory of lincheck (go/lincheck).
PORCUPINE = "v1.3.1"
# Helm 3: the chart in charts/raftset is linted, rendered, installed and upgraded with it.
HELM = "v3.22.0"
# Its client-go (k8s.io/client-go v0.37 is Kubernetes 1.37): the Kubernetes version that
# `helm template` and `helm lint` assume, as Helm's own Makefile stamps it.
HELM_KUBE_MINOR = "37"
# The newest patch of each supported etcd minor on the Go module proxy, newest first;
# each has its wrapper module go/etcd-<minor>.
ETCD = ("3.7.3", "3.6.16", "3.5.35")
# Xline master (crate version 0.6.1, `git describe` v0.7.0-40) and the toolchain its
# rust-toolchain.toml pins; the binary's cache directory is keyed by both.
XLINE = "0.6.1"
XLINE_COMMIT = "71479a4f"
RUST_TOOLCHAIN = "1.74.0"
# The real-node lab's cluster DNS.
COREDNS = "v1.12.3"
# cert-manager's controller, from the source snapshot in ../shared/cert-manager/ (certmanager.py).
CERT_MANAGER = "v1.21.1"

GO_DIR = Path(__file__).resolve().parent / "go"


def cache_root() -> Path:
    """Outside the checkout, so that a fresh clone or `git clean` keeps the builds."""
    root = os.environ.get("RAFTSET_CACHE") or os.path.join(Path.home(), ".cache", "raftset")
    return Path(root)


def bin_root() -> Path:
    return cache_root() / "bin"
