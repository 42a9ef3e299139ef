"""Helm, built from the Go module proxy (tools/devcluster/build.py HELM), and the chart in charts/raftset."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tools.devcluster import build

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "raftset"
NAMESPACE = "raftset-system"
RELEASE = "raftset"


def binary() -> Path:
    """The cached Helm, built first if missing; a build that fails fails the test."""
    build.ensure(build.HELM)
    return build.HELM.binary("helm")


def run(*args: str, kubeconfig: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = [str(binary()), *args]
    if kubeconfig is not None:
        argv.append(f"--kubeconfig={kubeconfig}")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done


def set_args(values: dict[str, str]) -> list[str]:
    return [arg for key, value in values.items() for arg in ("--set-json", f"{key}={value}")]


def template(chart: Path = CHART, **values: str) -> list[dict[str, Any]]:
    """`helm template --include-crds` of `chart` into raftset-system; `values` are --set-json pairs."""
    out = run("template", RELEASE, str(chart), "--namespace", NAMESPACE, "--include-crds", *set_args(values)).stdout
    return [d for d in yaml.safe_load_all(out) if d]
