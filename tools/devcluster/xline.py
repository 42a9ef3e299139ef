"""Build Xline from source into the version-keyed cache, the way build.py builds Go components.

Xline is a Rust workspace (no Go module proxy), pinned by commit and toolchain. The binary is
found, in this order:

1. cached at `<cache>/bin/xline-<commit>-rust<toolchain>/` (`xline`, and `xlineutl`, which
   restores a backup) with a matching inputs stamp;
2. built from the source archive `$RAFTSET_XLINE_SOURCE` (the snapshot in ../shared/xline/,
   which builds offline);
3. built from `git clone --recursive` of the pinned commit, where GitHub is reachable.

The source is unpacked (or cloned) once into `<cache>/src/xline-<commit>/` and cargo keeps
its target directory in `<cache>/cargo-target/`, so an interrupted or repeated build only
compiles what is missing. docs/devcluster.md lists the cold build times measured.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tools.devcluster import build, sources, versions

SOURCE_ENV = "RAFTSET_XLINE_SOURCE"
GIT_URL = "https://github.com/xline-kv/Xline"
BINARIES = ("xline", "xlineutl")  # the store, and the sidecar's restore of spec.bootstrap.fromBackup
CARGO_BUILD = ("build", "--release", "--locked")
CARGO_ARGS = (*CARGO_BUILD, *(arg for name in BINARIES for arg in ("--bin", name)))


class XlineBuildError(RuntimeError):
    """Xline could not be built; the message says which input is missing."""


@dataclass(frozen=True)
class RustComponent:
    name: str
    version: str  # the crate version `xline --version` prints
    commit: str
    toolchain: str

    @property
    def label(self) -> str:
        """How tests and docs name this build: `xline-0.6.1+71479a4f`."""
        return f"{self.name}-{self.version}+{self.commit}"

    @property
    def out_dir(self) -> Path:
        return versions.bin_root() / f"{self.name}-{self.commit}-rust{self.toolchain}"

    @property
    def source_root(self) -> Path:
        """Holds `xline/` (and, from the archive, `vendor/` beside it)."""
        return versions.cache_root() / "src" / f"{self.name}-{self.commit}"

    @property
    def crate_dir(self) -> Path:
        return self.source_root / "xline"

    @property
    def target_dir(self) -> Path:
        return versions.cache_root() / "cargo-target" / f"{self.name}-{self.commit}-{self.toolchain}"

    def binary(self, name: str = "xline") -> Path:
        return self.out_dir / name

    @property
    def source(self) -> sources.Source:
        return sources.Source(
            root=self.source_root, marker="xline/Cargo.lock", env=SOURCE_ENV,
            git=(("git", "clone", "--recursive", GIT_URL, "xline"),
                 ("git", "-C", "xline", "checkout", self.commit),
                 ("git", "-C", "xline", "submodule", "update", "--init", "--recursive")),
            archive=f"{self.name}-{self.commit}-src.tar.gz", error=XlineBuildError)


XLINE = RustComponent(name="xline", version=versions.XLINE, commit=versions.XLINE_COMMIT,
                      toolchain=versions.RUST_TOOLCHAIN)


def inputs_digest(component: RustComponent) -> str:
    """Commit, toolchain and cargo's build profile: the source archive and a clone of the commit
    build the same binaries, so where the source came from is not an input. Which binaries a
    build installed is checked by their presence (is_built), so the digest keeps the form it had
    when only `xline` was built, and a cache from then is completed rather than rebuilt."""
    return hashlib.sha256(repr((component.commit, component.toolchain, (*CARGO_BUILD, "--bin", "xline"))).encode()
                          ).hexdigest()


def is_built(component: RustComponent, digest: str) -> bool:
    return build.is_stamped(component.out_dir, digest, (component.binary(name) for name in BINARIES))


def built(component: RustComponent | None = None) -> bool:
    """Is the pinned Xline (or `component`) in the cache, without building it?"""
    component = component or XLINE
    return is_built(component, inputs_digest(component))


def ensure_source(component: RustComponent, log: Callable[[str], None]) -> Path:
    """The crate directory of the unpacked (or cloned) source, fetched once."""
    sources.ensure(component.source, log)
    return component.crate_dir


def cargo_env(component: RustComponent) -> dict[str, str]:
    """RUSTUP_TOOLCHAIN overrides rust-toolchain.toml, which would ask for extra components."""
    env = dict(os.environ)
    env.update(RUSTUP_TOOLCHAIN=component.toolchain, CARGO_TARGET_DIR=str(component.target_dir))
    return env


def _ensure_toolchain(component: RustComponent) -> None:
    if shutil.which("rustup") is None:
        raise XlineBuildError("rustup is not on PATH: install it, then "
                              f"`rustup toolchain install {component.toolchain} --profile minimal`")
    listed = subprocess.run(["rustup", "toolchain", "list"], check=True, capture_output=True, text=True).stdout
    if not any(line.startswith(f"{component.toolchain}-") for line in listed.splitlines()):
        subprocess.run(["rustup", "toolchain", "install", component.toolchain, "--profile", "minimal"], check=True)
    missing = [tool for tool in ("protoc", "clang") if shutil.which(tool) is None]
    if missing:
        raise XlineBuildError(f"Xline's build needs {', '.join(missing)}: "
                              "apt-get install protobuf-compiler libclang-dev clang")


def _build(component: RustComponent, digest: str, log: Callable[[str], None]) -> None:
    crate = ensure_source(component, log)
    _ensure_toolchain(component)
    log(f"building {component.label} with Rust {component.toolchain} (cargo {' '.join(CARGO_ARGS)})")
    # nice: the bundled RocksDB C++ build would otherwise starve everything else on the machine.
    subprocess.run(["nice", "-n", "19", "cargo", *CARGO_ARGS], cwd=crate, env=cargo_env(component), check=True)
    with build.installing(component.name, component.out_dir, digest) as out:
        for name in BINARIES:
            shutil.copy2(component.target_dir / "release" / name, out / name)


def ensure(component: RustComponent = XLINE, log: Callable[[str], None] = print) -> float:
    """Build Xline unless an identical build is cached; returns the seconds it took."""
    start = time.monotonic()
    digest = inputs_digest(component)
    build.ensure_cached(component.name, lambda: is_built(component, digest), lambda: _build(component, digest, log))
    took = time.monotonic() - start
    log(f"{component.label}: ready in {took:.1f}s at {component.out_dir}")
    return took
