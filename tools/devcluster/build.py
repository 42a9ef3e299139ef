"""Build the control-plane binaries from the Go module proxy into a version-keyed cache.

Each component is one `go build` inside its wrapper module (`go/<module>`), whose committed
go.mod/go.sum pin the whole dependency graph. A build lands in
`<cache>/bin/<component>-<version>/` only when complete (built in a temporary directory,
then renamed), with a stamp of its inputs; a later call whose inputs match returns at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tools.devcluster import versions

STAMP = ".inputs"


@dataclass(frozen=True)
class Patch:
    """A one-line edit to a dependency's `main` package, applied at build time.

    Used instead of vendoring a modified copy: the package's files are read from the module
    cache and built inside a temporary copy of the wrapper module (Go refuses -overlay
    replacements of files under GOMODCACHE).
    """

    package: str  # import path of a main package whose directory holds only that package
    path: str  # file inside that package
    old: str
    new: str

@dataclass(frozen=True)
class Component:
    name: str
    version: str
    module: str  # wrapper module directory name under go/
    packages: tuple[str, ...]
    binaries: tuple[str, ...]
    ldflags: tuple[str, ...] = ()
    patch: Patch | None = None
    # `go build -o dir/` names a binary after its package (`server` for .../server/v3);
    # these renames give it the name its users call.
    renames: tuple[tuple[str, str], ...] = ()

    @property
    def module_dir(self) -> Path:
        return versions.GO_DIR / self.module

    @property
    def out_dir(self) -> Path:
        return versions.bin_root() / f"{self.name}-{self.version}"

    def binary(self, name: str) -> Path:
        return self.out_dir / name


def _kube_version_ldflags(version: str) -> tuple[str, ...]:
    """Version stamps, so that `kubectl version` and /version report the real release."""
    major, minor = version.lstrip("v").split(".")[:2]
    stamps = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
    }
    return tuple(
        f"-X {pkg}.{var}={value}"
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for var, value in stamps.items()
    )


KUBE = Component(
    name="kube",
    version=versions.KUBERNETES,
    module="kube",
    packages=(
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-scheduler",
    ),
    binaries=("kube-apiserver", "kube-controller-manager", "kube-scheduler"),
    ldflags=_kube_version_ldflags(versions.KUBERNETES),
)

KRUISE = Component(
    name="kruise",
    version=versions.KRUISE,
    module="kruise",
    packages=("github.com/openkruise/kruise",),
    binaries=("kruise",),
    # The manager binds its webhook server to 0.0.0.0; we bind it to WEBHOOK_HOST
    # (a loopback address) so that nothing listens beyond 127.0.0.0/8.
    patch=Patch(
        package="github.com/openkruise/kruise",
        path="main.go",
        old='Host:    "0.0.0.0",',
        new="Host:    webhookutil.GetHost(),",
    ),
)

KWOK = Component(
    name="kwok",
    version=versions.KWOK,
    module="kwok",
    packages=("sigs.k8s.io/kwok/cmd/kwok",),
    binaries=("kwok",),
)

def _etcd(version: str) -> Component:
    """One wrapper module per etcd minor: server, etcdctl and etcdutl of one patch release."""
    minor = version.rsplit(".", 1)[0]
    return Component(
        name="etcd",
        version=version,
        module=f"etcd-{minor}",
        packages=tuple(f"go.etcd.io/etcd/{p}/v3" for p in ("server", "etcdctl", "etcdutl")),
        binaries=("etcd", "etcdctl", "etcdutl"),
        renames=(("server", "etcd"),),
    )


ETCDS = tuple(_etcd(v) for v in versions.ETCD)
# The local control plane's own store: the newest supported etcd.
ETCD = ETCDS[0]

COMPONENTS = (*ETCDS, KUBE, KRUISE, KWOK)


def go_env() -> dict[str, str]:
    """Never fetch a toolchain; go.sum (committed) is the integrity check, not the sumdb,
    which does not serve every module version the proxy serves."""
    env = dict(os.environ)
    env.update(GOTOOLCHAIN="local", GOSUMDB="off", GOFLAGS="-mod=readonly -buildvcs=false")
    return env


def _go(args: list[str], cwd: Path, capture: bool = False) -> str:
    proc = subprocess.run(
        ["go", *args],
        cwd=cwd,
        env=go_env(),
        check=True,
        text=True,
        stdout=subprocess.PIPE if capture else None,
    )
    return proc.stdout or ""


def module_source(component: Component, module: str) -> Path:
    """A dependency's source directory in the Go module cache (downloaded if absent)."""
    out = _go(["mod", "download", "-json", module], cwd=component.module_dir, capture=True)
    return Path(json.loads(out)["Dir"])


def inputs_digest(component: Component, go_version: str) -> str:
    """Everything that changes the binaries: pinned graph, flags, patches, toolchain."""
    h = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        h.update((component.module_dir / name).read_bytes())
    inputs: tuple[object, ...] = (component.packages, component.ldflags, component.patch, go_version)
    if component.renames:  # only then: the other components' stamps stay valid
        inputs += (component.renames,)
    h.update(repr(inputs).encode())
    return h.hexdigest()


def is_built(component: Component, digest: str) -> bool:
    stamp = component.out_dir / STAMP
    if not stamp.is_file() or stamp.read_text().strip() != digest:
        return False
    return all(os.access(component.binary(b), os.X_OK) for b in component.binaries)


@contextmanager
def locked(name: str) -> Iterator[None]:
    """One builder per component name across concurrent test sessions on this machine."""
    versions.bin_root().mkdir(parents=True, exist_ok=True)
    with open(versions.bin_root() / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _patched_module(component: Component, patch: Patch, workdir: Path) -> Path:
    """A throw-away copy of the wrapper module whose root is the patched main package."""
    listing = _go(["list", "-json", patch.package], cwd=component.module_dir, capture=True)
    package = json.loads(listing)
    if patch.path not in package["GoFiles"]:
        raise RuntimeError(f"{patch.package} has no file {patch.path} to patch")
    module = workdir / "module"
    module.mkdir()
    for name in ("go.mod", "go.sum"):
        shutil.copyfile(component.module_dir / name, module / name)
    for name in package["GoFiles"]:
        text = (Path(package["Dir"]) / name).read_text()
        if name == patch.path:
            if text.count(patch.old) != 1:
                raise RuntimeError(f"patch for {patch.package}/{name} no longer applies: {patch.old!r} not found once")
            text = text.replace(patch.old, patch.new)
        (module / name).write_text(text)
    return module


def _build(component: Component, digest: str, log: Callable[[str], None]) -> None:
    bin_root = versions.bin_root()
    with tempfile.TemporaryDirectory(prefix=f".{component.name}-", dir=bin_root) as tmp:
        tmpdir = Path(tmp)
        out = tmpdir / "out"
        out.mkdir()
        ldflags = " ".join(("-s", "-w", *component.ldflags))
        args = ["build", "-p", "2", "-trimpath", "-ldflags", ldflags]
        if component.patch:
            cwd = _patched_module(component, component.patch, tmpdir)
            args += ["-o", str(out / component.binaries[0]), "."]
        else:
            cwd = component.module_dir
            args += ["-o", str(out) + os.sep, *component.packages]
        log(f"building {component.name} {component.version} ({' '.join(component.packages)})")
        _go(args, cwd=cwd)
        for old, new in component.renames:
            (out / old).rename(out / new)
        (out / STAMP).write_text(digest + "\n")
        if component.out_dir.exists():
            shutil.rmtree(component.out_dir)
        out.rename(component.out_dir)


def ensure(component: Component, log: Callable[[str], None] = print) -> float:
    """Build `component` unless an identical build is cached; returns the seconds it took."""
    start = time.monotonic()
    go_version = _go(["env", "GOVERSION"], cwd=component.module_dir, capture=True).strip()
    digest = inputs_digest(component, go_version)
    if not is_built(component, digest):
        with locked(component.name):
            if not is_built(component, digest):
                _build(component, digest, log)
    took = time.monotonic() - start
    log(f"{component.name} {component.version}: ready in {took:.1f}s at {component.out_dir}")
    return took


def ensure_all(components: tuple[Component, ...] = COMPONENTS, log: Callable[[str], None] = print) -> dict[str, float]:
    return {f"{c.name}-{c.version}": ensure(c, log) for c in components}

