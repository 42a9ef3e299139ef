"""`python -m raftset.sidecar` / `raftset-sidecar`: run one member's sidecar."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

from aiohttp import web

from raftset.sidecar import config, http
from raftset.sidecar.agent import Agent, leave_then_stop
from raftset.sidecar.kube import Kube

log = logging.getLogger("raftset.sidecar")


async def serve(settings: config.Settings) -> None:
    kube = Kube.load(settings.namespace, os.environ.get("KUBECONFIG") or None)
    agent = Agent(settings, kube)
    runner = web.AppRunner(http.app(agent), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.http_host, settings.http_port).start()
    log.info("sidecar for %s (%s, %s) listening on %s:%d", settings.pod_name, settings.engine.name,
             settings.backend.name, settings.http_host, settings.http_port)
    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task[None]] = set()

    def on_signal(signame: str) -> None:
        log.info("%s received: leave if needed, then stop", signame)
        task = asyncio.create_task(leave_then_stop(agent, signame))
        pending.add(task)
        task.add_done_callback(pending.discard)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig.name)
    try:
        await agent.run()
        await agent.stopping.wait()
    finally:
        await runner.cleanup()
        await agent.close()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = config.parse(argv, os.environ)
    except config.ConfigError as exc:
        print(f"raftset-sidecar: configuration error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=getattr(logging, settings.log_level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    asyncio.run(serve(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
