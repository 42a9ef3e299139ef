"""The sidecar's HTTP face: probes, heartbeat, metrics and the preStop leave hook."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from raftset.sidecar.agent import Agent


def _json(doc: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(doc, sort_keys=True) + "\n", status=status, content_type="application/json")


def app(agent: Agent) -> web.Application:
    async def startup(_: web.Request) -> web.Response:
        doc = {"startup_written": agent.startup_written, "phase": agent.phase, "error": agent.last_error}
        return _json(doc, 200 if agent.startup_written else 503)

    async def livez(_: web.Request) -> web.Response:
        return _json({"ok": True})

    async def readyz(_: web.Request) -> web.Response:
        st = agent.status
        doc = {
            "ready": agent.ready,
            "phase": agent.phase,
            "serving": st is not None,
            "voting": st is not None and not st.is_learner,
            "error": agent.last_error,
        }
        return _json(doc, 200 if agent.ready else 503)

    async def heartbeat(_: web.Request) -> web.Response:
        return _json(agent.heartbeat.as_dict())

    async def metrics(_: web.Request) -> web.Response:
        labels = {"cluster": agent.settings.cluster, "pod": agent.settings.pod_name, "engine": agent.settings.engine.name}
        text = agent.metrics.render(agent.heartbeat, started=agent.startup_written, ready=agent.ready, labels=labels)
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def leave(_: web.Request) -> web.Response:
        # kubelet's preStop httpGet can only GET, so both methods run the same hook.
        result = await agent.leave("preStop")
        return _json(result, 200 if result.get("action") not in ("error", "timeout") else 500)

    application = web.Application()
    application.add_routes([
        web.get("/startup", startup),
        web.get("/livez", livez),
        web.get("/readyz", readyz),
        web.get("/heartbeat", heartbeat),
        web.get("/metrics", metrics),
        web.post("/leave", leave),
        web.get("/leave", leave, allow_head=False),
    ])
    return application
