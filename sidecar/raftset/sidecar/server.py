"""The sidecar's process: its HTTP server, its shells (app.Sidecar), its signal handlers, until it stops."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from aiohttp import web

from raftset.sidecar import http
from raftset.sidecar.app import Sidecar, leave_then_stop
from raftset.sidecar.io.kube import SidecarKube
from raftset.sidecar.pure import config

log = logging.getLogger("raftset.sidecar")


async def serve(settings: config.SidecarConfig) -> None:
    kube = SidecarKube.load(settings.namespace, os.environ.get("KUBECONFIG") or None)
    sidecar = Sidecar(settings, kube)
    runner = web.AppRunner(http.app(sidecar), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.http_host, settings.http_port).start()
    log.info("sidecar for %s (%s, %s) listening on %s:%d", settings.pod_name, settings.engine.name,
             settings.backend.name, settings.http_host, settings.http_port)
    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task[None]] = set()

    def on_signal(signame: str) -> None:
        log.info("%s received: leave if needed, then stop", signame)
        task = asyncio.create_task(leave_then_stop(sidecar, signame))
        pending.add(task)
        task.add_done_callback(pending.discard)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig.name)
    try:
        await sidecar.run()
        await sidecar.stopping.wait()
    finally:
        await runner.cleanup()
        await sidecar.close()
