"""OCI image archives built by plain code (no Docker, no registry): one layer of files.

`ctr -n k8s.io images import` loads an archive into a node's containerd and names the image
from the index's annotations.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path


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
    layer_gz = gzip.compress(layer, compresslevel=1, mtime=0)  # fast: the archive never leaves the machine
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


def cached_archive(cache: Path, name: str, files: dict[str, Path], entrypoint: list[str]) -> Path:
    """`image_archive` of these files, kept in `cache` under a name keyed by every input."""
    h = hashlib.sha256(repr((name, sorted(files), entrypoint)).encode())
    for _, path in sorted(files.items()):
        h.update(hashlib.sha256(path.read_bytes()).digest())
    archive = cache / f"{name.rsplit('/', 1)[-1].replace(':', '-')}-{h.hexdigest()[:16]}.oci.tar"
    if not archive.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        partial = archive.with_suffix(f".{os.getpid()}.partial")
        partial.write_bytes(image_archive(name, {n: p.read_bytes() for n, p in files.items()}, entrypoint))
        partial.rename(archive)  # whole or absent, also beside a concurrent run
    return archive
