"""The lab's tiny images: static Go programs, each the only file of its image.

- pause: the pod sandbox's process (kubelet's sandbox image);
- echo: answers every TCP connection on port 8080 with its host name (the pod's name) and
  closes it; Service traffic and DNS names are checked against it.

Each is built with the local Go toolchain (no cgo: static), packed by `images.image_archive`
and cached with its stamp beside the other builds; nodes import the archives with
`ctr -n k8s.io images import`.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tools.devcluster import build, images, versions


@dataclass(frozen=True)
class Program:
    name: str  # the binary, at the image's root
    image: str
    source: str  # main.go

    @property
    def out_dir(self) -> Path:
        return versions.bin_root() / f"{self.name}-{self.image.rsplit(':', 1)[1]}"

    @property
    def archive(self) -> Path:
        return self.out_dir / f"{self.name}.oci.tar"

    @property
    def go_mod(self) -> str:
        return f"module raftset.dev/devcluster/{self.name}\n\ngo 1.24\n"

    def inputs_digest(self, go_version: str) -> str:
        return hashlib.sha256(repr((self.source, self.go_mod, self.image, go_version)).encode()).hexdigest()


PAUSE = Program("pause", "localhost/pause:3.10", """\
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
""")

ECHO = Program("echo", "localhost/lab-echo:1", """\
// echo: answers every TCP connection on :8080 with the host name and closes it.
package main

import (
	"net"
	"os"
)

func main() {
	name, err := os.Hostname()
	if err != nil {
		panic(err)
	}
	listener, err := net.Listen("tcp", ":8080")
	if err != nil {
		panic(err)
	}
	for {
		conn, err := listener.Accept()
		if err != nil {
			continue
		}
		conn.Write([]byte(name + "\\n"))
		conn.Close()
	}
}
""")


def _build(program: Program, digest: str) -> None:
    with build.installing(program.name, program.out_dir, digest) as out:
        module = out.parent / "module"
        module.mkdir()
        (module / "go.mod").write_text(program.go_mod)
        (module / "main.go").write_text(program.source)
        subprocess.run(["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(out / program.name), "."],
                       cwd=module, env={**build.go_env(), "CGO_ENABLED": "0"}, check=True)
        (out / program.archive.name).write_bytes(images.image_archive(
            program.image, {program.name: (out / program.name).read_bytes()}, [f"/{program.name}"]))


def ensure_archive(program: Program) -> Path:
    """The program's image archive, built once per toolchain and source."""
    digest = program.inputs_digest(build.go_version())
    build.ensure_cached(program.name, lambda: build.is_stamped(program.out_dir, digest, [program.out_dir / program.name]),
                        lambda: _build(program, digest))
    return program.archive
