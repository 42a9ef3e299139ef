"""Telling the replace steps the sidecars recorded: one named Event per step, remembered in the status.

The Event is applied (server-side) and awaited before the status that counts it as told is
patched: an operator killed in between tells it again as the same object (pure.narration).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from raftset.operator.io.api import KubeAPI
from raftset.operator.io.kube import api_error_message
from raftset.operator.pure import replace
from raftset.operator.pure.narration import named_event

log = logging.getLogger("raftset.operator")


async def tell_replace_steps(kube: KubeAPI, body: kopf.Body, entries: Sequence[Mapping[str, Any]],
                            narrated: Sequence[Mapping[str, Any]], now: datetime) -> list[dict[str, Any]]:
    """Tell every replace step not told yet; the new status.narrated. A refused Event stops the telling
    here: the next reconcile goes on from the last step told."""
    memory = [dict(n) for n in narrated]
    for tale in replace.untold(entries, memory):
        if tale.event is not None:
            try:
                await kube.apply(named_event(body, replace.event_name(body.metadata.name, tale), tale.event,
                                             now))
            except ApiException as error:
                log.warning("%s: telling %s's replacement step %d failed: %s", body.metadata.name, tale.pod,
                            tale.step, api_error_message(error))
                break
        memory = replace.remember(memory, tale)
    return memory
