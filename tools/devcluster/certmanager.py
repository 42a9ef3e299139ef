"""Build cert-manager's controller from source into the version-keyed cache, like xline.py.

The controller's main package is its own module (`cmd/controller`, with a `replace` of the
main module to `../../`), which the Go module proxy does not serve. The binary is found, in
this order:

1. cached at `<cache>/bin/cert-manager-<version>/cert-manager-controller` with a matching
   inputs stamp (the CRDs of the same release are copied beside it, in `crds/`);
2. built from the source archive `$RAFTSET_CERT_MANAGER_SOURCE` (the snapshot in
   ../shared/cert-manager/, whose only change leaves out the Venafi issuer, refused by the
   proxy here);
3. built from a `git clone` of the release tag, where GitHub is reachable.

Only the controller runs: the CA and SelfSigned issuers need neither its webhook nor its
cainjector. docs/devcluster.md lists the cold build times measured.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tools.devcluster import build, sources, versions

SOURCE_ENV = "RAFTSET_CERT_MANAGER_SOURCE"
GIT_URL = "https://github.com/cert-manager/cert-manager"
BINARY = "cert-manager-controller"


class CertManagerBuildError(RuntimeError):
    """cert-manager could not be built; the message says which input is missing."""


@dataclass(frozen=True)
class SourceComponent:
    name: str
    version: str

    @property
    def out_dir(self) -> Path:
        return versions.bin_root() / f"{self.name}-{self.version}"

    @property
    def source_root(self) -> Path:
        """Holds `cert-manager/`, the repository at the release tag."""
        return versions.cache_root() / "src" / f"{self.name}-{self.version}"

    @property
    def repo_dir(self) -> Path:
        return self.source_root / "cert-manager"

    @property
    def crds_dir(self) -> Path:
        """The release's CustomResourceDefinitions, copied beside the binary."""
        return self.out_dir / "crds"

    def binary(self) -> Path:
        return self.out_dir / BINARY

    @property
    def source(self) -> sources.Source:
        return sources.Source(
            root=self.source_root, marker="cert-manager/cmd/controller/go.mod", env=SOURCE_ENV,
            git=(("git", "clone", "--depth", "1", "--branch", self.version, GIT_URL, "cert-manager"),),
            archive=f"{self.name}-{self.version}-src.tar.gz", error=CertManagerBuildError)


CERT_MANAGER = SourceComponent(name="cert-manager", version=versions.CERT_MANAGER)


def inputs_digest(component: SourceComponent, go_version: str) -> str:
    """The release, the toolchain and the build flags: archive and clone build the same binary."""
    return hashlib.sha256(repr((component.version, go_version, _build_args(Path("out")))).encode()).hexdigest()


def _build_args(out: Path) -> list[str]:
    return ["build", "-p", "2", "-trimpath", "-ldflags", "-s -w", "-o", str(out), "."]


def is_built(component: SourceComponent, digest: str) -> bool:
    return build.is_stamped(component.out_dir, digest, (component.binary(),)) and any(component.crds_dir.glob("*.yaml"))


def ensure_source(component: SourceComponent, log: Callable[[str], None]) -> Path:
    """The repository of the unpacked (or cloned) source, fetched once."""
    sources.ensure(component.source, log)
    return component.repo_dir


def _build(component: SourceComponent, digest: str, log: Callable[[str], None]) -> None:
    repo = ensure_source(component, log)
    with build.installing(component.name, component.out_dir, digest) as out:
        log(f"building cert-manager {component.version} controller from {repo}")
        # nice: two cores are shared with the tests.
        subprocess.run(["nice", "-n", "19", "go", *_build_args(out / BINARY)], cwd=repo / "cmd" / "controller",
                       env=build.go_env(), check=True)
        shutil.copytree(repo / "deploy" / "crds", out / "crds",
                        ignore=lambda _d, names: [n for n in names if not n.endswith(".yaml")])


def ensure(component: SourceComponent = CERT_MANAGER, log: Callable[[str], None] = print) -> float:
    """Build the controller unless an identical build is cached; returns the seconds it took."""
    start = time.monotonic()
    digest = inputs_digest(component, build.go_version())
    build.ensure_cached(component.name, lambda: is_built(component, digest), lambda: _build(component, digest, log))
    took = time.monotonic() - start
    log(f"cert-manager {component.version}: ready in {took:.1f}s at {component.out_dir}")
    return took
