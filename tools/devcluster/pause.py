"""The lab's pause image: a static binary that sleeps until told to stop and reaps orphans.

Built with the local Go toolchain (no cgo: static), packed as an OCI image archive by
`images.image_archive` (pure) and cached with its stamp beside the other builds; each node's
containerd imports the archive with `ctr -n k8s.io images import`.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from tools.devcluster import build, images, versions

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
            images.image_archive(IMAGE, {"pause": (out / "pause").read_bytes()}, ["/pause"]))


def ensure_archive() -> Path:
    """The pause image's archive, built once per toolchain and source."""
    digest = inputs_digest(build.go_version())
    build.ensure_cached("pause", lambda: build.is_stamped(out_dir(), digest, [out_dir() / "pause"]),
                        lambda: _build(digest))
    return archive_path()
