"""The operator's asynchronous API client against a real kube-apiserver whose connection hangs.

The client reaches the apiserver through a Toxiproxy that is then told to let no byte through and
close nothing. Every call must give up on its own, as the one error type the components catch, so
that a hung connection costs one reconcile a failed round, not its cluster's next five minutes.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes.aio.client
import kubernetes.aio.config
import pytest
from kubernetes.client.exceptions import ApiException

from raftset.operator.io import kube
from tests.harness.toxiproxy import Toxiproxy
from tools.devcluster.net import free_port

pytestmark = pytest.mark.k8s

PROXY = "apiserver"
TIMEOUT_S = 2.0


@pytest.fixture
async def proxied(kube_apiserver: Any, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[kube.KubeClient, Toxiproxy]]:
    """The operator's client session, reaching the apiserver only through a Toxiproxy (on an address
    its certificate names), with a short request timeout."""
    monkeypatch.setattr(kube, "REQUEST_TIMEOUT_S", TIMEOUT_S)
    with Toxiproxy(tmp_path / "toxiproxy", host=kube_apiserver.host) as proxy:
        listen = f"{kube_apiserver.host}:{free_port(kube_apiserver.host)}"
        proxy.proxy(PROXY, listen, urlsplit(kube_apiserver.url).netloc)
        configuration = kubernetes.aio.client.Configuration()
        await kubernetes.aio.config.load_kube_config(kube_apiserver.kubeconfig, client_configuration=configuration)
        configuration.host = f"https://{listen}"
        session = await kube.session(configuration)
        try:
            yield session, proxy
        finally:
            await session.close()


async def test_every_call_on_a_hung_connection_gives_up_within_its_timeout_as_an_api_error(
        namespace: str, proxied: tuple[kube.KubeClient, Toxiproxy]) -> None:
    session, proxy = proxied
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe", "namespace": namespace},
                  "data": {"a": "1"}}
    assert (await session.apply(config_map))["data"] == {"a": "1"}, "the session works through the proxy"
    assert (await session.get("v1", "ConfigMap", namespace, "probe"))["data"] == {"a": "1"}
    proxy.stall(PROXY)
    calls = {
        "get": session.get("v1", "ConfigMap", namespace, "probe"),
        "list": session.list("v1", "ConfigMap", namespace, ""),
        "apply": session.apply(config_map),
        "merge_patch": session.merge_patch("v1", "ConfigMap", namespace, "probe", {"data": {"b": "2"}}),
        "delete": session.delete("v1", "ConfigMap", namespace, "probe"),
    }
    for name, call in calls.items():
        started = time.monotonic()
        with pytest.raises(ApiException) as raised:
            await call
        took = time.monotonic() - started
        assert raised.value.status == 0 and "no answer from the API server" in str(raised.value), (name, raised.value)
        assert TIMEOUT_S - 0.5 < took < TIMEOUT_S + 3, f"{name} gave up after {took:.1f}s"


async def test_a_delete_with_a_uid_leaves_the_object_re_created_under_the_name(
        namespace: str, operator_session: kube.KubeClient) -> None:
    """A roll and a quorum-loss recovery judge one pod incarnation: one re-created under its name
    between the judgement and the delete must survive the delete."""
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "judged", "namespace": namespace}}
    judged = (await operator_session.apply(config_map))["metadata"]["uid"]
    await operator_session.delete("v1", "ConfigMap", namespace, "judged")
    again = (await operator_session.apply(config_map))["metadata"]["uid"]
    assert again != judged
    await operator_session.delete("v1", "ConfigMap", namespace, "judged", uid=judged)
    kept = await operator_session.get("v1", "ConfigMap", namespace, "judged")
    assert kept is not None and kept["metadata"]["uid"] == again, "the re-created object was deleted"
    await operator_session.delete("v1", "ConfigMap", namespace, "judged", uid=again)
    assert await operator_session.get("v1", "ConfigMap", namespace, "judged") is None, "the judged incarnation stays"
    await operator_session.delete("v1", "ConfigMap", namespace, "judged", uid=again)  # gone already: done
