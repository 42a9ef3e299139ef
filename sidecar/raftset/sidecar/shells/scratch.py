"""The scratch shell: on every member, remove the copies the store abandoned in its scratch volume."""

from __future__ import annotations

import asyncio
import logging
import time

from raftset.sidecar.io import scratch as disk
from raftset.sidecar.metrics import Metrics
from raftset.sidecar.pure import scratch
from raftset.sidecar.pure.config import SidecarConfig

log = logging.getLogger("raftset.sidecar")


class ScratchShell:
    """Runs only where the engine has a scratch volume (engines.Scratch) and the pod mounts it."""

    def __init__(self, settings: SidecarConfig, metrics: Metrics) -> None:
        assert settings.engine.scratch is not None and settings.scratch_dir
        self.directory, self.prefix = settings.scratch_dir, settings.engine.scratch.prefix
        self.metrics = metrics

    async def round(self) -> None:
        copies = await asyncio.to_thread(disk.entries, self.directory, self.prefix)
        gone = scratch.abandoned(copies, self.prefix, time.time())
        for copy in gone:
            await asyncio.to_thread(disk.remove, self.directory, copy.name)
        if gone:
            size = sum(c.size for c in gone)
            self.metrics.scratch_removed(len(gone), size)
            log.info("scratch: removed %d copies the store abandoned in %s (%.1f MiB; %d left)",
                     len(gone), self.directory, size / 2**20, len(copies) - len(gone))
