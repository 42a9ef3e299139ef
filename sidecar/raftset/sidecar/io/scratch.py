"""The store's scratch volume on disk: what is in it, and removing one entry."""

from __future__ import annotations

import os
import shutil
import stat

from raftset.sidecar.pure.scratch import Copy


def _measure(path: str) -> tuple[float, int]:
    """(newest mtime, bytes) of `path` and the files under it; what vanished meanwhile counts as nothing."""
    try:
        top = os.lstat(path)
    except FileNotFoundError:
        return 0.0, 0
    if not stat.S_ISDIR(top.st_mode):
        return top.st_mtime, top.st_size
    newest, size = top.st_mtime, 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            newest, size = max(newest, st.st_mtime), size + st.st_size
    return newest, size


def entries(directory: str, prefix: str) -> list[Copy]:
    """The entries of `directory` whose names start with `prefix`."""
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    except FileNotFoundError:
        return []
    return [Copy(name, *_measure(os.path.join(directory, name))) for name in names]


def remove(directory: str, name: str) -> None:
    path = os.path.join(directory, name)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
