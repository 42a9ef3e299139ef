"""Moving a member's data dir aside, and letting the releasable copies go once a new member votes.

Repair never deletes data on the way: the old data dir (and its marker) is renamed beside
the live one, with a small file inside saying why. Two kinds of copy, one mechanism:

- `<dir>.aside-<time>` (replace, lost volume, stale data): stays until the member that
  replaced it is a voter, when `release` deletes it;
- `<dir>.<keep_as>`, e.g. `data.quorum-loss-<id>` (quorum-loss recovery): never released,
  since a quorum loss may have left acknowledged writes only there (docs/operations.md).

Until then a person can still copy it back, or read it with `etcdutl`. Nothing here decides
*whether* to move data: callers do that from a linearizable answer (raftset.sidecar.pure.join,
raftset.sidecar.pure.quorum_loss).
"""

from __future__ import annotations

import os
import shutil
import time

ASIDE = ".aside-"
LEGACY_STALE = ".stale-"  # what earlier sidecars named the same thing
REASON_FILE = "raftset-moved-aside.txt"


def quorum_loss_name(recovery_id: str) -> str:
    """The `keep_as` of data a quorum-loss recovery moves aside: never released."""
    return f"quorum-loss-{recovery_id}"


def _parent_and_prefixes(data_dir: str) -> tuple[str, tuple[str, ...]]:
    base = data_dir.rstrip("/")
    name = os.path.basename(base)
    return os.path.dirname(base) or ".", (name + ASIDE, name + LEGACY_STALE)


def move_aside(data_dir: str, marker_path: str, reason: str, *, keep_as: str | None = None,
               now: float | None = None) -> str:
    """Rename the data dir (and its marker) beside itself; returns the new path.

    `<dir>.aside-<unix time>` by default, which `release` deletes once a new member votes;
    `<dir>.<keep_as>` for a copy that is never released. Earlier copies are kept (a name
    already taken gets `-1`, `-2`, ...). The reason goes into a small file inside the copy,
    for whoever finds it later.
    """
    base = data_dir.rstrip("/")
    first = f"{base}.{keep_as}" if keep_as else f"{base}{ASIDE}{int(time.time() if now is None else now)}"
    dest, n = first, 0
    while os.path.exists(dest):
        n += 1
        dest = f"{first}-{n}"
    if os.path.exists(base):
        os.replace(base, dest)
    else:
        os.makedirs(dest)
    with open(os.path.join(dest, REASON_FILE), "w", encoding="utf-8") as fh:
        fh.write(reason + "\n")
    if os.path.exists(marker_path):
        os.replace(marker_path, f"{dest}.member.json")
    return dest


def aside(data_dir: str) -> list[str]:
    """Every releasable copy moved aside and not yet released, oldest first (kept copies are not listed)."""
    parent, prefixes = _parent_and_prefixes(data_dir)
    try:
        names = os.listdir(parent)
    except FileNotFoundError:
        return []
    return sorted(os.path.join(parent, n) for n in names
                  if n.startswith(prefixes) and not n.endswith(".member.json"))


def release(data_dir: str) -> list[str]:
    """Delete every releasable copy (the member that replaced it votes now); returns what went."""
    gone = aside(data_dir)
    for path in gone:
        shutil.rmtree(path, ignore_errors=True)
        if os.path.exists(f"{path}.member.json"):
            os.unlink(f"{path}.member.json")
    return gone
