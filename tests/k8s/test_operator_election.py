"""The operator's leader election against a real kube-apiserver whose connection hangs.

The holder talks to the apiserver through a Toxiproxy that is then told to let no byte
through and close nothing: its renewal never returns. It must stop acting before a standby
(talking to the apiserver directly) can take its Lease, and each request must give up on its own.
Short timings keep the test fast; their proportions are the shipped ones'.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client, config

from raftset.operator import election
from tests.harness.toxiproxy import Toxiproxy
from tests.harness.waiting import wait_for
from tools.devcluster.net import free_port

pytestmark = pytest.mark.k8s

TIMING = election.Timing(lease_duration=4.5, renew_deadline=3.0, retry_period=0.6)  # the shipped ones x 0.3
PROXY = "apiserver"


def api_client(kubeconfig: str, host: str | None = None) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(kubeconfig, client_configuration=configuration)
    if host is not None:
        configuration.host = host
    return client.ApiClient(configuration)


@pytest.fixture
def proxied(kube_apiserver: Any, tmp_path: Path) -> Iterator[tuple[client.ApiClient, Toxiproxy]]:
    """A client that reaches the apiserver only through a Toxiproxy (on an address its certificate names)."""
    with Toxiproxy(tmp_path / "toxiproxy", host=kube_apiserver.host) as proxy:
        listen = f"{kube_apiserver.host}:{free_port(kube_apiserver.host)}"
        proxy.proxy(PROXY, listen, urlsplit(kube_apiserver.url).netloc)
        yield api_client(kube_apiserver.kubeconfig, f"https://{listen}"), proxy


def lease_version(api: client.ApiClient, namespace: str) -> str:
    lease = client.CoordinationV1Api(api).read_namespaced_lease(election.LEASE_NAME, namespace)
    return str(lease.metadata.resource_version)


def test_a_hung_renewal_stops_the_holder_before_a_standby_can_take_its_lease(
        kube_apiserver: Any, namespace: str, proxied: tuple[client.ApiClient, Toxiproxy]) -> None:
    through_proxy, proxy = proxied
    direct = api_client(kube_apiserver.kubeconfig)
    holder = election.Elector(through_proxy, namespace, "holder", TIMING)
    holder.acquire()
    lost = threading.Event()
    lost_at: list[float] = []
    holder.keep(lambda: (lost_at.append(time.monotonic()), lost.set()))
    first = lease_version(direct, namespace)
    wait_for(lambda: lease_version(direct, namespace) != first, 5, "the holder renewing through the proxy")

    proxy.stall(PROXY)
    last = lease_version(direct, namespace)
    last_seen = time.monotonic()  # no renewal can land after this one: its reply, if any, is stalled
    standby = election.Elector(direct, namespace, "standby", TIMING)
    taken_at: list[float] = []
    threading.Thread(target=lambda: (standby.acquire(), taken_at.append(time.monotonic())), daemon=True).start()

    assert lost.wait(TIMING.lease_duration), \
        f"the holder still acts {TIMING.lease_duration:.1f}s after its renewal hung"
    wait_for(lambda: bool(taken_at), 3 * TIMING.lease_duration, "the standby taking the Lease")
    assert lost_at[0] - last_seen < TIMING.lease_duration
    assert taken_at[0] > lost_at[0], "the standby took the Lease while the holder still acted"
    assert lease_version(direct, namespace) != last


def test_a_request_on_a_hung_connection_gives_up_within_its_timeout(
        namespace: str, proxied: tuple[client.ApiClient, Toxiproxy]) -> None:
    through_proxy, proxy = proxied
    holder = election.Elector(through_proxy, namespace, "holder", TIMING)
    assert holder.try_once()
    proxy.stall(PROXY)
    outcome: list[BaseException | bool] = []

    def renew() -> None:
        try:
            outcome.append(holder.try_once())
        except Exception as error:  # noqa: BLE001 - the test looks at what it was
            outcome.append(error)

    started = time.monotonic()
    renewal = threading.Thread(target=renew, daemon=True)
    renewal.start()
    renewal.join(TIMING.renew_deadline + 1)
    assert not renewal.is_alive(), f"a renewal on a hung connection still waits after {time.monotonic() - started:.1f}s"
    assert len(outcome) == 1 and isinstance(outcome[0], Exception), outcome
    assert "timed out" in str(outcome[0]).lower(), outcome[0]
    assert time.monotonic() - started < TIMING.request_timeout + 1
