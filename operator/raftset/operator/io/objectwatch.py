"""The operator's own watches of what its rounds read, kept out of kopf: the clusters' Leases, their
member pods, their workloads (raftset.operator.pure.books).

kopf gives every object of a watched resource a worker of its own, and before its first handler
runs it waits until every indexed object was processed once; at 1000 clusters a restarted operator
spent 100 s before its first round (2026-11-29), by a py-spy profile mostly in that wait, whose every
step wakes every waiting worker. Here one task per resource and namespace lists, then watches from the list's
resourceVersion with bookmarks, each event one `json.loads` into a book, no client model built. A
stream that ends is watched again from the last version seen; one that is gone (410) or broken is
listed again, after a bounded backoff on errors. A resource the apiserver does not serve (an
OpenKruise CRD absent or deleted) reads as empty and is listed again every NOT_SERVED_S. What the
book says changed goes to `changed`. The first list of every namespace is in before `listed` is
set: a round reads no book that is still empty.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

import aiohttp
from kubernetes.aio.client import ApiClient
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from raftset.operator.pure.books import Book, Change
from raftset.operator.watches import Watch

log = logging.getLogger("raftset.operator.objectwatch")

WATCH_SECONDS = 300  # the server ends each watch request by then; it is renewed from the last version
REQUEST_TIMEOUT_S = 60.0  # for a list (thousands of objects)
# The longest wait for the next line of a watch of the Leases, which every member renews every few
# seconds: a silent stream past this is a hung connection. A quiet resource (pods, workloads at rest)
# may say nothing for a whole request (the apiserver sent no bookmark within 90 s here): its wait
# is bounded by the request's end, WATCH_SECONDS, plus this.
SILENCE_S = 90.0
AFTER_FAILURE_S = 1.0  # a watch refused at once (its list answered) is not asked again in a tight loop
NOT_SERVED_S = 10.0  # a resource the apiserver does not serve is listed again after this long


class Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class NotServed(Exception):
    """The apiserver does not serve the resource (404): its CRD is not installed."""


class ObjectWatch:
    """Keeps `book` current with `watch`'s objects that match `selector`, in the operator's
    namespaces (none: every namespace)."""

    def __init__(self, api: ApiClient, watch: Watch, selector: str, book: Book, namespaces: Sequence[str],
                 changed: Callable[[Change], None], *, watch_seconds: int = WATCH_SECONDS,
                 silence_s: float | None = None) -> None:
        """`silence_s`: how long a stream may say nothing before it counts as hung; None: a whole request."""
        self._api = api
        self._watch_of = watch
        self._selector = selector
        self._book = book
        self._namespaces: list[str | None] = list(namespaces) or [None]
        self._changed = changed
        self._watch_seconds = watch_seconds
        self._silence_s = silence_s if silence_s is not None else watch_seconds + SILENCE_S
        self._pending = len(self._namespaces)
        self.listed = asyncio.Event()  # every namespace listed once
        self.relists = 0  # lists after the first, for the metrics

    @property
    def name(self) -> str:
        return self._watch_of.name

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
            if version is None:
                await asyncio.sleep(NOT_SERVED_S)
                continue
            try:
                while True:
                    version = await self._watch(namespace, version)
            except (Gone, NotServed):
                log.info("the watch of %s ended (its version expired, or it is no longer served): listing again",
                         self.name)
            except Exception as error:  # noqa: BLE001 - never given up: the operator would be blind
                log.warning("the watch of %s failed (%r): listing again", self.name, error)
                await asyncio.sleep(AFTER_FAILURE_S)

    async def _relist(self, namespace: str | None) -> str | None:
        """A list, retried with a growing pause until one is answered; None: not served (read as empty)."""
        async for attempt in AsyncRetrying(wait=wait_exponential(multiplier=0.5, max=30),
                                           retry=retry_if_exception_type(Exception),
                                           before_sleep=self._logged):
            with attempt:
                return await self._list(namespace)
        raise AssertionError("unreachable: retried until answered")

    async def _request(self, namespace: str | None, timeout: float, **query: str) -> Any:
        """A GET of the collection, its body not read: the response to stream or read whole."""
        params = await self._api.param_serialize(
            "GET", self._watch_of.path(namespace),
            query_params=[("labelSelector", self._selector), *query.items()],
            header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
        return (await self._api.call_api(*params, _preload_content=False, _request_timeout=timeout)).response

    async def _list(self, namespace: str | None) -> str | None:
        response = await self._request(namespace, REQUEST_TIMEOUT_S)
        async with response:
            if response.status == 404:
                found: dict[str, Any] = {"items": [], "metadata": {}}
            elif response.status != 200:
                raise aiohttp.ClientResponseError(response.request_info, (), status=response.status,
                                                  message=f"listing {self.name}: {(await response.text())[:300]}")
            else:
                found = json.loads(await response.read())
        for change in self._book.listed(found.get("items") or [], namespace, _now()):
            self._changed(change)
        return str(found["metadata"]["resourceVersion"]) if response.status == 200 else None

    async def _watch(self, namespace: str | None, version: str) -> str:
        """One watch request from `version`; the last version seen when the server ends it."""
        response = await self._request(namespace, self._watch_seconds + SILENCE_S, watch="true",
                                       allowWatchBookmarks="true", resourceVersion=version,
                                       timeoutSeconds=str(self._watch_seconds))
        async with response:
            if response.status == 410:
                raise Gone()
            if response.status == 404:
                raise NotServed()
            if response.status != 200:
                raise aiohttp.ClientResponseError(response.request_info, (), status=response.status,
                                                  message=f"watching {self.name}: {(await response.text())[:300]}")
            loop = asyncio.get_running_loop()
            # One timer moved on at each line: a wait_for per line cost a task each, at hundreds a second.
            async with asyncio.timeout(self._silence_s) as silence:
                while line := await response.content.readline():
                    version = self._event(json.loads(line), version)
                    silence.reschedule(loop.time() + self._silence_s)
        return version

    def _event(self, event: dict[str, Any], version: str) -> str:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise ValueError(f"the watch of {self.name} failed: {obj.get('message') or obj}")
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

    def _logged(self, state: RetryCallState) -> None:
        log.warning("listing %s failed (%r): again in %.1f s", self.name,
                    state.outcome.exception() if state.outcome else None,
                    state.next_action.sleep if state.next_action else 0.0)


def _now() -> datetime:
    return datetime.now(timezone.utc)
