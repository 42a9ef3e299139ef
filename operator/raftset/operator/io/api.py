"""The Kubernetes API calls the operator's components make: one protocol, served by io.kube.KubeClient.

The components depend on this protocol, not on the client, so that unit tests drive them with
an in-memory fake.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class KubeAPI(Protocol):
    async def has_api(self, api_version: str, kind: str) -> bool: ...

    async def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]: ...

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def list(self, api_version: str, kind: str, namespace: str | None, selector: str, *,
                   fields: str = "") -> list[dict[str, Any]]: ...

    async def merge_patch(self, api_version: str, kind: str, namespace: str, name: str,
                          patch: Mapping[str, Any], *, subresource: str = "") -> None: ...

    async def delete(self, api_version: str, kind: str, namespace: str, name: str, *, uid: str = "",
                     grace_seconds: int | None = None) -> None:
        """Gone already is done; with `uid`, only that incarnation is deleted (a precondition
        the apiserver checks), and one re-created under the name meanwhile is left alone;
        `grace_seconds` overrides the object's own (0: at once)."""
