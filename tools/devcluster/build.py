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
from collections.abc import Callable, Iterable, Iterator
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
class SourceEdit:
    """A one-line edit anywhere in a module that is built from a copy of its own source."""

    path: str  # file inside the module
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
    # Built inside a writable copy of this module's source (downloaded through the wrapper
    # module), with its own go.mod and go.sum, these edits and build tags; `packages` are
    # then relative to it ("./cmd/x").
    source_module: str | None = None
    source_edits: tuple[SourceEdit, ...] = ()
    tags: tuple[str, ...] = ()
    # No cgo: a static binary that runs on an image with no libc (the lab's CoreDNS).
    static: bool = False
    # The wrapper module holds the component's own Go source: its *.go files are inputs too.
    own_source: bool = False

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

# kwok deletes a terminated pod by name alone. A delete of its that came late took the pod the
# workload had just re-created under that name (a roll's member restarted twice). kubelet deletes
# with the pod's UID as a precondition (its status manager); so does this kwok.
KWOK = Component(
    name="kwok",
    version=versions.KWOK,
    module="kwok",
    packages=("./cmd/kwok",),
    binaries=("kwok",),
    source_module="sigs.k8s.io/kwok",
    source_edits=(SourceEdit(
        path="pkg/kwok/controllers/pod_controller.go",
        old="c.typedClient.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, deleteOpt)",
        new=("c.typedClient.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{"
             "GracePeriodSeconds: deleteOpt.GracePeriodSeconds, Preconditions: metav1.NewUIDPreconditions(string(pod.UID))})"),
    ),),
)

VERSITYGW = Component(
    name="versitygw",
    version=versions.VERSITYGW,
    module="versitygw",
    packages=("github.com/versity/versitygw/cmd/versitygw",),
    binaries=("versitygw",),
)

TOXIPROXY = Component(
    name="toxiproxy",
    version=versions.TOXIPROXY,
    module="toxiproxy",
    packages=("github.com/Shopify/toxiproxy/v2/cmd/server",),
    binaries=("toxiproxy-server",),
    renames=(("server", "toxiproxy-server"),),
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

# promtool checks and unit-tests the monitoring kit's alert rules. `go install .../promtool@`
# fails here: its Nomad service discovery needs a module the proxy refuses. Built without any
# service discovery (the remove_all_sd tag) and with the Nomad import, which that tag does not
# cover, deleted from the registration list.
PROMTOOL = Component(
    name="promtool",
    version=versions.PROMETHEUS,
    module="promtool",
    packages=("./cmd/promtool",),
    binaries=("promtool",),
    source_module="github.com/prometheus/prometheus",
    source_edits=(SourceEdit(
        path="discovery/install/install.go",
        old='\t_ "github.com/prometheus/prometheus/discovery/nomad"        // register nomad\n',
        new="",
    ),),
    tags=("remove_all_sd",),
)

# Helm, stamped as its own Makefile stamps a release (`helm version`, and the Kubernetes version
# `helm template` and `helm lint` assume: that of its client-go).
HELM = Component(
    name="helm",
    version=versions.HELM,
    module="helm",
    packages=("helm.sh/helm/v3/cmd/helm",),
    binaries=("helm",),
    ldflags=(
        f"-X helm.sh/helm/v3/internal/version.version={versions.HELM}",
        "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
        *(f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersion{part}={value}"
          for pkg in ("chartutil", "lint/rules")
          for part, value in (("Major", "1"), ("Minor", versions.HELM_KUBE_MINOR))),
    ),
)

# The real-node lab's node binaries (docs/devcluster.md, "Real nodes"): the control plane's
# Kubernetes release in a wrapper module of its own, whose graph adds what only they import
# (kube's stamp stays valid; the shared packages come from Go's build cache).
KUBENODE = Component(
    name="kubenode",
    version=versions.KUBERNETES,
    module="kubenode",
    packages=("k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kube-proxy"),
    binaries=("kubelet", "kube-proxy"),
    ldflags=_kube_version_ldflags(versions.KUBERNETES),
)

COREDNS = Component(
    name="coredns",
    version=versions.COREDNS,
    module="coredns",
    packages=("github.com/coredns/coredns",),
    binaries=("coredns",),
    static=True,  # its image holds the binary alone
)

# The robustness campaign's linearizability checker (issue 27): porcupine with our own
# register-per-key model (why not etcd's: docs/robustness.md, "The checker").
LINCHECK = Component(
    name="lincheck",
    version=versions.PORCUPINE,
    module="lincheck",
    packages=(".",),
    binaries=("lincheck",),
    own_source=True,
)

# What the local control plane runs, and all `make run` builds before it shows anything (its etcd
# is the demo's too); versitygw, Xline and cert-manager follow in the background
# (tools/devcluster/__main__.py).
PLANE = (ETCD, KUBE, KRUISE, KWOK)
# `make controlplane` (and so `make test`) builds every component: besides, the older etcd minors
# (upgrades), the fault-injection proxy, promtool (tests, bench), Helm (the chart's tests), the
# linearizability checker, and the real-node lab's kubelet, kube-proxy and CoreDNS (the `real` tier).
COMPONENTS = (*ETCDS, KUBE, KRUISE, KWOK, VERSITYGW, TOXIPROXY, PROMTOOL, HELM, LINCHECK, KUBENODE, COREDNS)


def go_env() -> dict[str, str]:
    """Never fetch a toolchain; go.sum (committed) is the integrity check, not the sumdb,
    which does not serve every module version the proxy serves."""
    env = dict(os.environ)
    caller = os.environ.get("GOFLAGS", "")
    env.update(GOTOOLCHAIN="local", GOSUMDB="off", GOFLAGS=" ".join(("-mod=readonly -buildvcs=false", caller)).strip())
    return env


def parallelism_args(goflags: str) -> list[str]:
    """Two packages at once, unless the caller's GOFLAGS sets `-p` (`GOFLAGS=-p=1` beside other work)."""
    if any(flag == "-p" or flag.startswith("-p=") for flag in goflags.split()):
        return []
    return ["-p", "2"]


def _go(args: list[str], cwd: Path | None, capture: bool = False, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        ["go", *args],
        cwd=cwd,
        env={**go_env(), **(env or {})},
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
    if component.source_module:
        inputs += (component.source_module, component.source_edits, component.tags)
    if component.static:
        inputs += ("static",)
    h.update(repr(inputs).encode())
    if component.own_source:
        for path in sorted(component.module_dir.glob("*.go")):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


# ---- the cache, shared with the components built from source (xline.py, certmanager.py)


def is_stamped(out_dir: Path, digest: str, executables: Iterable[Path]) -> bool:
    """`out_dir` holds a build of exactly these inputs: its stamp says `digest`, its binaries run."""
    stamp = out_dir / STAMP
    if not stamp.is_file() or stamp.read_text().strip() != digest:
        return False
    return all(os.access(path, os.X_OK) for path in executables)


@contextmanager
def locked(name: str) -> Iterator[None]:
    """One builder per component name across concurrent test sessions on this machine."""
    versions.bin_root().mkdir(parents=True, exist_ok=True)
    with open(versions.bin_root() / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextmanager
def installing(name: str, out_dir: Path, digest: str) -> Iterator[Path]:
    """An empty directory to build into, in a temporary one (free for scratch files) on the
    cache's file system; on success it is stamped with `digest` and renamed to `out_dir`,
    so `out_dir` holds a whole build or none."""
    versions.bin_root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=versions.bin_root()) as tmp:
        out = Path(tmp) / "out"
        out.mkdir()
        yield out
        (out / STAMP).write_text(digest + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        out.rename(out_dir)


def ensure_cached(name: str, ready: Callable[[], bool], make: Callable[[], None]) -> None:
    """`make` unless `ready`; under the lock, checked again: another session may have just built it."""
    if not ready():
        with locked(name):
            if not ready():
                make()


def is_built(component: Component, digest: str) -> bool:
    return is_stamped(component.out_dir, digest, (component.binary(b) for b in component.binaries))


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


def _source_copy(component: Component, workdir: Path) -> Path:
    """A writable copy of the component's own module source, with its edits applied."""
    assert component.source_module is not None
    module = workdir / "module"
    shutil.copytree(module_source(component, component.source_module), module)
    for root, dirs, files in os.walk(module):  # the module cache is read-only
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o755 if name in dirs else 0o644)
    for edit in component.source_edits:
        path = module / edit.path
        text = path.read_text()
        if text.count(edit.old) != 1:
            raise RuntimeError(f"edit of {component.source_module}/{edit.path} no longer applies: "
                               f"{edit.old!r} not found once")
        path.write_text(text.replace(edit.old, edit.new))
    return module


def _build(component: Component, digest: str, log: Callable[[str], None]) -> None:
    with installing(component.name, component.out_dir, digest) as out:
        scratch = out.parent  # removed with `out`'s temporary directory
        ldflags = " ".join(("-s", "-w", *component.ldflags))
        args = ["build", *parallelism_args(os.environ.get("GOFLAGS", "")), "-trimpath", "-ldflags", ldflags]
        env: dict[str, str] = {"CGO_ENABLED": "0"} if component.static else {}
        if component.tags:
            args += ["-tags", ",".join(component.tags)]
        if component.source_module:
            cwd = _source_copy(component, scratch)
            env["GOWORK"] = "off"
            args += ["-o", str(out) + os.sep, *component.packages]
        elif component.patch:
            cwd = _patched_module(component, component.patch, scratch)
            args += ["-o", str(out / component.binaries[0]), "."]
        else:
            cwd = component.module_dir
            args += ["-o", str(out) + os.sep, *component.packages]
        log(f"building {component.name} {component.version} ({' '.join(component.packages)})")
        _go(args, cwd=cwd, env=env)
        for old, new in component.renames:
            (out / old).rename(out / new)


def go_version(cwd: Path | None = None) -> str:
    """The local toolchain's version (GOTOOLCHAIN=local: never another one), an input of every Go build."""
    return _go(["env", "GOVERSION"], cwd=cwd, capture=True).strip()


def ensure(component: Component, log: Callable[[str], None] = print) -> float:
    """Build `component` unless an identical build is cached; returns the seconds it took."""
    start = time.monotonic()
    digest = inputs_digest(component, go_version(component.module_dir))
    ensure_cached(component.name, lambda: is_built(component, digest), lambda: _build(component, digest, log))
    took = time.monotonic() - start
    log(f"{component.name} {component.version}: ready in {took:.1f}s at {component.out_dir}")
    return took


def prefetched(missing: Iterable[Component]) -> list[Component]:
    """Whose modules to download while the first missing one builds (each `go build` downloads
    its own, one after the other; downloading waits on the network, compiling on the CPU).
    A component built from a copy of its own source downloads that first, in its build."""
    return [c for c in list(missing)[1:] if c.source_module is None]


def _download(component: Component) -> subprocess.Popen:
    """`go list -deps` of the component's packages: it downloads exactly the modules they import."""
    return subprocess.Popen(["go", "list", "-deps", "-f", "{{.ImportPath}}", *component.packages],
                            cwd=component.module_dir, env=go_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def ensure_all(components: tuple[Component, ...] = COMPONENTS, log: Callable[[str], None] = print) -> dict[str, float]:
    missing = [c for c in components if not is_built(c, inputs_digest(c, go_version(c.module_dir)))]
    # A failed download is the build's to report: it downloads again and says why.
    downloads = [_download(c) for c in prefetched(missing)]
    try:
        return {f"{c.name}-{c.version}": ensure(c, log) for c in components}
    finally:
        for download in downloads:
            download.kill()
            download.wait()

