"""The operator's one watch of the clusters' Leases, kept out of kopf (raftset.operator.pure.leasebook).

List, then watch from the list's resourceVersion with bookmarks, each event one `json.loads` and
no client model built; a stream that ends is watched again from the last version seen, and one
that is gone (410) or broken is listed again, after a bounded backoff on errors. What the book
says changed rings the cluster (and feeds the staleness timer). The first list of every
namespace is in before `listed` is set: a round reads no book that is still empty.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

import aiohttp
from kubernetes.aio.client import ApiClient, CoordinationV1Api
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from raftset import contract
from raftset.operator.pure.leasebook import Change, LeaseBook

log = logging.getLogger("raftset.operator.leasewatch")

SELECTOR = contract.LABEL_INSTANCE  # every Lease of a cluster: heartbeats, membership, backup
WATCH_SECONDS = 300  # the server ends each watch request by then; it is renewed from the last version
REQUEST_TIMEOUT_S = 30.0  # for a list
# The longest wait for the next line of a watch: the apiserver sends a bookmark about every minute,
# and every member renews every few seconds; a silent stream past this is a hung connection.
SILENCE_S = 90.0
AFTER_FAILURE_S = 1.0  # a watch refused at once (its list answered) is not asked again in a tight loop


class Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class LeaseWatch:
    """Keeps `book` current for the operator's namespaces (None: every namespace)."""

    def __init__(self, api: ApiClient, book: LeaseBook, namespaces: Sequence[str],
                 changed: Callable[[Change], None], *, watch_seconds: int = WATCH_SECONDS) -> None:
        self._leases = CoordinationV1Api(api)
        self._book = book
        self._namespaces: list[str | None] = list(namespaces) or [None]
        self._changed = changed
        self._watch_seconds = watch_seconds
        self._pending = len(self._namespaces)
        self.listed = asyncio.Event()  # every namespace listed once
        self.relists = 0  # lists after the first, for the metrics

    async def run(self) -> None:
        """Until cancelled: one watch per namespace."""
        await asyncio.gather(*(self._follow(namespace) for namespace in self._namespaces))

    async def _follow(self, namespace: str | None) -> None:
        first = True
        while True:
            version = await self._relist(namespace)
            if first:
                first = False
                self._pending -= 1
                if not self._pending:
                    self.listed.set()
            else:
                self.relists += 1
            try:
                while True:
                    version = await self._watch(namespace, version)
            except Gone:
                log.info("the Lease watch's version expired: listing again")
            except Exception as error:  # noqa: BLE001 - never given up: the operator would be blind to every member
                log.warning("the Lease watch failed (%r): listing again", error)
                await asyncio.sleep(AFTER_FAILURE_S)

    async def _relist(self, namespace: str | None) -> str:
        """A list, retried with a growing pause until one is answered."""
        async for attempt in AsyncRetrying(wait=wait_exponential(multiplier=0.5, max=30),
                                           retry=retry_if_exception_type(Exception), before_sleep=_logged):
            with attempt:
                return await self._list(namespace)
        raise AssertionError("unreachable: retried until answered")

    async def _list(self, namespace: str | None) -> str:
        kwargs: dict[str, Any] = {"label_selector": SELECTOR, "_request_timeout": REQUEST_TIMEOUT_S}
        if namespace is None:
            response = await self._leases.list_lease_for_all_namespaces_without_preload_content(**kwargs)
        else:
            response = await self._leases.list_namespaced_lease_without_preload_content(namespace, **kwargs)
        async with response:
            if response.status != 200:
                raise aiohttp.ClientResponseError(response.request_info, (), status=response.status,
                                                  message=f"listing Leases: {(await response.text())[:300]}")
            found = json.loads(await response.read())
        for change in self._book.listed(found.get("items") or [], namespace, _now()):
            self._changed(change)
        return str(found["metadata"]["resourceVersion"])

    async def _watch(self, namespace: str | None, version: str) -> str:
        """One watch request from `version`; the last version seen when the server ends it."""
        kwargs: dict[str, Any] = {"label_selector": SELECTOR, "watch": True, "allow_watch_bookmarks": True,
                                  "resource_version": version, "timeout_seconds": self._watch_seconds,
                                  "_request_timeout": self._watch_seconds + SILENCE_S}
        if namespace is None:
            response = await self._leases.list_lease_for_all_namespaces_without_preload_content(**kwargs)
        else:
            response = await self._leases.list_namespaced_lease_without_preload_content(namespace, **kwargs)
        async with response:
            if response.status == 410:
                raise Gone()
            if response.status != 200:
                raise aiohttp.ClientResponseError(response.request_info, (), status=response.status,
                                                  message=f"watching Leases: {(await response.text())[:300]}")
            while line := await asyncio.wait_for(response.content.readline(), SILENCE_S):
                version = self._event(json.loads(line), version)
        return version

    def _event(self, event: dict[str, Any], version: str) -> str:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise ValueError(f"the Lease watch failed: {obj.get('message') or obj}")
        meta = obj.get("metadata") or {}
        if kind == "DELETED":
            change = self._book.deleted(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        elif kind in ("ADDED", "MODIFIED"):
            change = self._book.seen(obj, _now())
        else:  # BOOKMARK: only a newer version to resume from
            change = None
        if change is not None:
            self._changed(change)
        return str(meta.get("resourceVersion") or version)


def _logged(state: RetryCallState) -> None:
    log.warning("listing the Leases failed (%r): again in %.1f s", state.outcome.exception() if state.outcome else None,
                state.next_action.sleep if state.next_action else 0.0)


def _now() -> datetime:
    return datetime.now(timezone.utc)
