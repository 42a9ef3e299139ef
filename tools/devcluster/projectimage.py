"""The project's image for the real-node lab: buildah builds the project's own Dockerfile, with
local bases in place of the upstream ones (its build arguments), so the image users deploy is
the image tested.

- The Python base: a Debian bookworm rootfs from mmdebstrap, with Python 3.11 as `python`
  (the minor of `python:3.11-slim`), venv, passwd and libstdc++ (grpcio's wheel links it).
- The tools base: etcdutl and xlineutl from the build cache at /usr/local/bin, where the
  Dockerfile copies them from the etcd image and the Rust stage.

Everything is cached by content: the rootfs by its suite and packages, each image by the digests
of everything it is built from; a changed source file, Dockerfile or base builds a new image.
buildah keeps its own storage in the cache (vfs driver, chroot isolation) and never touches the
machine's /var/lib/containers. pip in the Dockerfile's build stage reaches PyPI, as `make venv` does,
and trusts what the host trusts: the host's CA bundle is bind-mounted over the image's during
each RUN step only (this sandbox reaches PyPI through a proxy whose CA only the host has; Debian's
pip reads the system bundle). Nothing of it lands in a layer.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from raftset import engines
from tools.devcluster import build, versions, xline

SUITE = "bookworm"
PACKAGES = ("python3-minimal", "libpython3.11-stdlib", "python3-venv", "python-is-python3", "libstdc++6",
            "passwd", "ca-certificates")
# What `python:3.11-slim` sets that a program could read (its PATH has /usr/local/bin first, as here).
PYTHON_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")
IMAGE = "localhost/raftset"
# The Dockerfile's context: what its COPY lines read (tests/unit/test_kustomize.py checks the list).
CONTEXT = ("Dockerfile", "pyproject.toml", "README.md", "raftset", "operator", "sidecar", "plugin")
SKIP = ("__pycache__", ".egg-info", ".pyc")
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # Debian's path, on the host and in the image
ROOT = Path(__file__).resolve().parents[2]


def build_args(python_base: str, tools_base: str) -> dict[str, str]:
    """The Dockerfile's base arguments for local bases: one tools image lends etcdutl and xlineutl."""
    return {"PYTHON_BASE": python_base, "ETCD_BASE": tools_base, "XLINEUTL_FROM": tools_base}


def context_files(root: Path) -> list[Path]:
    """The files the image is built from, sorted; caches and build leftovers are not inputs."""
    out: list[Path] = []
    for name in CONTEXT:
        path = root / name
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        out += [p for p in candidates if not any(part.endswith(SKIP) for part in p.relative_to(root).parts)]
    return out


def content_key(named_inputs: dict[str, bytes]) -> str:
    """16 hex digits over every input's name and bytes."""
    h = hashlib.sha256()
    for name, data in sorted(named_inputs.items()):
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


def _file_key(paths: dict[str, Path]) -> str:
    return content_key({name: path.read_bytes() for name, path in paths.items()})


def _images_dir() -> Path:
    return versions.bin_root() / "images"


def _buildah(*args: str, cwd: Path | None = None) -> str:
    storage = versions.cache_root() / "buildah"
    argv = ["buildah", "--root", str(storage / "root"), "--runroot", str(storage / "run"),
            "--storage-driver", "vfs", *args]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[7:9])} failed ({result.returncode}): {result.stderr[-3000:]}")
    return result.stdout.strip()


def _has_image(name: str) -> bool:
    try:
        _buildah("inspect", "--type", "image", name)
    except RuntimeError:
        return False
    return True


def rootfs_archive() -> Path:
    """The Debian rootfs as a tar, made once per suite and package list (about 90 s)."""
    key = content_key({"suite": SUITE.encode(), "packages": ",".join(PACKAGES).encode()})
    archive = _images_dir() / f"rootfs-{SUITE}-{key}.tar"
    if not archive.is_file():
        archive.parent.mkdir(parents=True, exist_ok=True)
        partial = archive.with_suffix(f".{os.getpid()}.partial.tar")
        subprocess.run(["mmdebstrap", "--quiet", "--variant=essential", f"--include={','.join(PACKAGES)}", SUITE,
                        str(partial)], check=True, capture_output=True)
        partial.rename(archive)  # whole or absent
    return archive


def python_base() -> str:
    """The rootfs as an image in buildah's storage, named by the rootfs's content."""
    rootfs = rootfs_archive()
    name = f"localhost/raftset-base/python:3.11-{_file_key({'rootfs': rootfs})}"
    if not _has_image(name):
        container = _buildah("from", "scratch")
        _buildah("add", container, str(rootfs), "/")
        _buildah("config", *(a for e in PYTHON_ENV for a in ("--env", e)), "--cmd", "python3", container)
        _buildah("commit", "--rm", container, name)
    return name


def tool_binaries() -> dict[str, Path]:
    return {"etcdutl": build.ETCD.binary("etcdutl"), "xlineutl": xline.XLINE.binary("xlineutl")}


def tools_base() -> str:
    """etcdutl and xlineutl at /usr/local/bin, on no base: the Dockerfile only copies them out."""
    binaries = tool_binaries()
    name = f"localhost/raftset-base/tools:{_file_key(binaries)}"
    if not _has_image(name):
        container = _buildah("from", "scratch")
        for binary, path in binaries.items():
            _buildah("copy", "--chmod", "0755", container, str(path), f"/usr/local/bin/{binary}")
        _buildah("commit", "--rm", container, name)
    return name


def ensure_archive(root: Path = ROOT) -> tuple[str, Path]:
    """The image's name and its OCI archive (for `ctr images import`), built if its inputs changed."""
    python, tools = python_base(), tools_base()
    inputs = {str(p.relative_to(root)): p.read_bytes() for p in context_files(root)}
    key = content_key({**inputs, "base:python": python.encode(), "base:tools": tools.encode()})
    name = f"{IMAGE}:{key}"
    archive = _images_dir() / f"raftset-{key}.oci.tar"
    if not archive.is_file():
        args = [a for k, v in build_args(python, tools).items() for a in ("--build-arg", f"{k}={v}")]
        _buildah("bud", "--isolation", "chroot", "--pull=never", "--volume", f"{CA_BUNDLE}:{CA_BUNDLE}:ro", *args,
                 "-t", name, "-f", "Dockerfile", ".", cwd=root)
        partial = archive.with_suffix(f".{os.getpid()}.partial.tar")
        try:
            _buildah("push", name, f"oci-archive:{partial}:{name}")
        finally:
            _buildah("rmi", name)  # vfs keeps a full copy per image: only the bases stay
        partial.rename(archive)
    return name, archive


def store_archive(etcd: build.Component = build.ETCD) -> tuple[str, Path]:
    """etcd's binaries at /usr/local/bin, as the upstream image has them, named as the operator
    renders the store image."""
    return _store_archive(engines.ETCD.image(etcd.version), {b: etcd.binary(b) for b in etcd.binaries})


def xline_archive() -> tuple[str, Path]:
    """Xline at /usr/local/bin, named as the operator renders the store image of an XlineCluster
    (its command is `sh -c`, as on the upstream Debian-based image)."""
    return _store_archive(engines.XLINE.image(), {"xline": xline.XLINE.binary("xline")})


def _store_archive(name: str, binaries: dict[str, Path]) -> tuple[str, Path]:
    """The binaries on the Python base (they link glibc and libstdc++), cached by content."""
    python = python_base()
    key = content_key({**{b: p.read_bytes() for b, p in binaries.items()}, "base:python": python.encode(),
                       "name": name.encode()})
    archive = _images_dir() / f"{name.rsplit('/', 1)[-1].replace(':', '-')}-{key}.oci.tar"
    if not archive.is_file():
        container = _buildah("from", "--pull=never", python)
        try:
            for binary, path in binaries.items():
                _buildah("copy", "--chmod", "0755", container, str(path), f"/usr/local/bin/{binary}")
            _buildah("config", "--cmd", f"/usr/local/bin/{next(iter(binaries))}", container)
            _buildah("commit", container, name)
        finally:
            _buildah("rm", container)
        partial = archive.with_suffix(f".{os.getpid()}.partial.tar")
        try:
            _buildah("push", name, f"oci-archive:{partial}:{name}")
        finally:
            _buildah("rmi", name)
        partial.rename(archive)
    return name, archive
