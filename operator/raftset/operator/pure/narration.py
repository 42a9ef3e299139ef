"""An Event under a name of its own, for what must be told exactly once.

An Event named after what it tells is applied (server-side) and awaited before the status that
counts it as told is patched: an operator killed in between tells it again as the same object,
never as a second Event.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from raftset.operator.pure.events import Event
from raftset.times import rfc3339


def named_event(body: Mapping[str, Any], name: str, event: Event, now: datetime) -> dict[str, Any]:
    """An Event on the cluster object as kopf would post it, under a name of its own: applied twice, still one."""
    kind, reason, message = event
    stamp = rfc3339(now)
    meta = body["metadata"]
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": meta["namespace"]},
        "type": kind, "reason": reason, "message": message,
        "involvedObject": {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
                           "name": meta["name"], "namespace": meta["namespace"],
                           "uid": meta.get("uid")},
        "source": {"component": "kopf"}, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }
