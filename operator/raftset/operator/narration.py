"""Telling what the sidecars recorded: one named Event per step, remembered in the status.

An Event named after what it tells is applied (server-side) and awaited before the status that
counts it as told is patched: an operator killed in between tells it again as the same object,
never as a second Event.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from raftset.operator import replacements
from raftset.operator.kube import Kube, api_error_message
from raftset.times import rfc3339

log = logging.getLogger("raftset.operator")


def named_event(body: kopf.Body, name: str, event: tuple[str, str, str], now: datetime) -> dict[str, Any]:
    """An Event on the cluster object as kopf would post it, under a name of its own: applied twice, still one."""
    kind, reason, message = event
    stamp = rfc3339(now)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": body.metadata.namespace},
        "type": kind, "reason": reason, "message": message,
        "involvedObject": {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
                           "name": body.metadata.name, "namespace": body.metadata.namespace,
                           "uid": body.metadata.uid},
        "source": {"component": "kopf"}, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


async def tell_replacements(kube: Kube, body: kopf.Body, entries: Sequence[Mapping[str, Any]],
                            narrated: Sequence[Mapping[str, Any]], now: datetime) -> list[dict[str, Any]]:
    """Tell every replacement step not told yet; the new status.narrated. A refused Event stops the telling
    here: the next reconcile goes on from the last step told."""
    memory = [dict(n) for n in narrated]
    for tale in replacements.untold(entries, memory):
        if tale.event is not None:
            try:
                await kube.apply(named_event(body, replacements.event_name(body.metadata.name, tale), tale.event,
                                             now))
            except ApiException as error:
                log.warning("%s: telling %s's replacement step %d failed: %s", body.metadata.name, tale.pod,
                            tale.step, api_error_message(error))
                break
        memory = replacements.remember(memory, tale)
    return memory
