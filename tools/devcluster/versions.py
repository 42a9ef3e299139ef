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

GO_DIR = Path(__file__).resolve().parent / "go"


def cache_root() -> Path:
    """Outside the checkout, so that a fresh clone or `git clean` keeps the builds."""
    root = os.environ.get("RAFTSET_CACHE") or os.path.join(Path.home(), ".cache", "raftset")
    return Path(root)


def bin_root() -> Path:
    return cache_root() / "bin"
