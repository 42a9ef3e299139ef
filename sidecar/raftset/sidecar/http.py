"""The sidecar's HTTP face: probes, heartbeat, metrics and the preStop leave hook."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from raftset.sidecar.app import Sidecar
from raftset.sidecar.metrics import CONTENT_TYPE


def _json(doc: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(doc, sort_keys=True) + "\n", status=status, content_type="application/json")


def app(sidecar: Sidecar) -> web.Application:
    state = sidecar.state

    async def startup(_: web.Request) -> web.Response:
        doc = {"startup_written": state.startup_written, "phase": state.phase, "error": state.last_error}
        return _json(doc, 200 if state.startup_written else 503)

    async def livez(_: web.Request) -> web.Response:
        # Fails only when a background loop died or is stuck (supervision.py): a restart helps
        # there, while an unreachable peer or API (readyz's business) never fails it.
        verdict = sidecar.loops.liveness()
        loops = {h.name: {"rounds": h.rounds, "expected_errors": h.expected_errors,
                          "unexpected_errors": h.unexpected_errors} for h in sidecar.loops.health()}
        return _json({"ok": verdict.alive, "problems": list(verdict.problems), "loops": loops},
                     200 if verdict.alive else 503)

    async def readyz(_: web.Request) -> web.Response:
        st, verdict = state.status, state.readiness
        doc = {
            "ready": verdict.ready,
            "reason": verdict.reason,
            "phase": state.phase,
            "serving": st is not None,
            "voting": st is not None and not st.is_learner,
            "error": state.last_error,
        }
        return _json(doc, 200 if verdict.ready else 503)

    async def heartbeat(_: web.Request) -> web.Response:
        return _json(state.heartbeat.as_dict())

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=sidecar.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def leave(_: web.Request) -> web.Response:
        # kubelet's preStop httpGet can only GET, so both methods run the same hook.
        result = await sidecar.leave("preStop")
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
