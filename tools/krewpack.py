"""The archive krew installs (plugins/krew/raftset.yaml): the shim `kubectl-raftset`, packed byte for byte
the same on every machine, so that the manifest's sha256 can be checked.

    python -m tools.krewpack dist/kubectl-raftset.tar.gz   # the release asset the manifest names
"""

from __future__ import annotations

import gzip
import hashlib
import io
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KREW = ROOT / "plugins" / "krew"
FILES = ("kubectl-raftset",)


def archive() -> bytes:
    """A gzipped tar of FILES with every timestamp, owner and mode fixed."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in FILES:
            data = (KREW / name).read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def sha256() -> str:
    return hashlib.sha256(archive()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    Path(args[0]).parent.mkdir(parents=True, exist_ok=True)
    Path(args[0]).write_bytes(archive())
    print(sha256())
    return 0


if __name__ == "__main__":
    sys.exit(main())
