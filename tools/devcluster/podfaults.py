"""What a pod must be given before it starts for two faults to be injected into it later: a
sidecar clock that can be skewed (Debian's libfaketime) and a data volume that can fill (a
size-limited tmpfs). Both stand-in kubelets use it: the `etcd` tier's lab (tests/harness/faults)
and the pod runner (tools/devcluster/podrunner), so a fault means the same in either.
"""

from __future__ import annotations

import errno
import glob
import subprocess
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

# Debian's libfaketime (`make system-deps`).
LIBFAKETIME = "/usr/lib/*/faketime/libfaketime.so.1"
CLOCK_OFFSET_FILE = "clock-offset"
BALLAST = "ballast"


def skewable_clock(offset: Path) -> dict[str, str]:
    """The sidecar's extra env: libfaketime reads its offset from `offset` on every call (written
    "+0" here), so a skew needs no restart. Only the wall clock moves: the monotonic clock
    (asyncio's timers) stays true, as NTP leaves it."""
    found = glob.glob(LIBFAKETIME)
    if not found:
        raise RuntimeError(f"libfaketime not installed ({LIBFAKETIME}): make system-deps")
    offset.parent.mkdir(parents=True, exist_ok=True)
    if not offset.exists():
        offset.write_text("+0\n")
    return {"LD_PRELOAD": found[0], "FAKETIME_TIMESTAMP_FILE": str(offset), "FAKETIME_NO_CACHE": "1",
            "DONT_FAKE_MONOTONIC": "1"}


def skew(offset: Path, seconds: int) -> None:
    """The clock `seconds` ahead (behind, if negative); 0 makes it true again."""
    if not offset.is_file():
        raise RuntimeError(f"{offset}: the pod was not started with a skewable clock")
    offset.write_text(f"{seconds:+d}s\n" if seconds else "+0\n")


def stamped_ahead(heartbeat: Mapping[str, Any], now: datetime | None = None) -> float:
    """How many seconds ahead of `now` a sidecar's `/heartbeat` is stamped: what its skewed clock shows."""
    stamped = datetime.fromisoformat(str(heartbeat["time"]).replace("Z", "+00:00"))
    return (stamped - (now or datetime.now(timezone.utc))).total_seconds()


def mount_small(volume: Path, size_mb: int) -> None:
    """`volume` becomes a tmpfs of `size_mb` (etcd preallocates 64 MiB of WAL), unless it is a mount
    already (a pod re-created on its claim keeps its data). Mounting needs root, as the loopback
    addresses do."""
    volume.mkdir(parents=True, exist_ok=True)
    if not volume.is_mount():
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(volume)],
                       check=True)


def unmount(volume: Path) -> None:
    """Lazily: a store may still hold files open until it is killed."""
    subprocess.run(["umount", "--lazy", str(volume)], check=False)


def fill(volume: Path) -> Path:
    """A ballast file in `volume` that takes every free byte; returns it (unlink it to end the fault)."""
    ballast = volume / BALLAST
    chunk = b"\0" * (1 << 20)
    with open(ballast, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return ballast
