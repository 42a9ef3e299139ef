"""The lab's pause image: a static binary that sleeps until told to stop and reaps orphans.

Built with the local Go toolchain (no cgo: static), packed as an OCI image archive by
`image_archive` (pure) and cached with its stamp beside the other builds; each node's
containerd imports the archive with `ctr -n k8s.io images import`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

from tools.devcluster import build, versions

IMAGE = "localhost/pause:3.10"
SOURCE = """\
// pause: the pod sandbox's process. It sleeps, reaps the children it inherits, and exits
// on SIGINT or SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
"""
GO_MOD = "module raftset.dev/devcluster/pause\n\ngo 1.24\n"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(files: dict[str, bytes]) -> bytes:
    """An uncompressed layer tar of executable files at the root, with fixed metadata."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def image_archive(name: str, files: dict[str, bytes], entrypoint: list[str]) -> bytes:
    """An OCI image layout, as a tar, of one layer holding `files`; the same inputs give the
    same bytes. `ctr images import` names the image from the index's annotations."""
    layer = _layer(files)
    layer_gz = gzip.compress(layer, mtime=0)
    config = json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint},
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _digest(config),
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": _digest(layer_gz),
                    "size": len(layer_gz)}],
    }, sort_keys=True).encode()
    tag = name.rsplit(":", 1)[1]
    index = json.dumps({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": _digest(manifest),
            "size": len(manifest),
            "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag},
        }],
    }, sort_keys=True).encode()
    entries = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}', "index.json": index}
    for blob in (layer_gz, config, manifest):
        entries["blobs/sha256/" + _digest(blob).split(":", 1)[1]] = blob
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in entries.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def out_dir() -> Path:
    return versions.bin_root() / "pause-3.10"


def archive_path() -> Path:
    return out_dir() / "pause.oci.tar"


def inputs_digest(go_version: str) -> str:
    return hashlib.sha256(repr((SOURCE, GO_MOD, IMAGE, go_version)).encode()).hexdigest()


def _build(digest: str) -> None:
    with build.installing("pause", out_dir(), digest) as out:
        module = out.parent / "module"
        module.mkdir()
        (module / "go.mod").write_text(GO_MOD)
        (module / "main.go").write_text(SOURCE)
        subprocess.run(["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(out / "pause"), "."],
                       cwd=module, env={**build.go_env(), "CGO_ENABLED": "0"}, check=True)
        (out / archive_path().name).write_bytes(
            image_archive(IMAGE, {"pause": (out / "pause").read_bytes()}, ["/pause"]))


def ensure_archive() -> Path:
    """The pause image's archive, built once per toolchain and source."""
    digest = inputs_digest(build.go_version())
    build.ensure_cached("pause", lambda: build.is_stamped(out_dir(), digest, [out_dir() / "pause"]),
                        lambda: _build(digest))
    return archive_path()
