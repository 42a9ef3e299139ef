"""A real Toxiproxy between the members' peer ports: latency between zones (or in front of any
TCP server a test names: a slow link to the S3 server).

Each member listens for its peers on `PEER_BEHIND` (2382) and keeps advertising its usual
peer URL (:2380), where a Toxiproxy proxy forwards to it. Every Raft message a member
receives therefore crosses that member's proxy; a latency toxic on both directions of
every proxy delays each message one way and its reply on the same connection the other
way, as a link between zones does. The kernel here has no netem, so a userspace proxy
is the way; everything stays on the lab's loopback addresses.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from raftset.contract import SidecarEnv
from tests.harness.lab import Lab
from tests.harness.waiting import wait_for
from tools.devcluster import build, procs
from tools.devcluster.net import free_port

PEER_BEHIND = 2382  # where a member listens for peers; its proxy listens on the advertised :2380 (2381: metrics)
CLIENT_BEHIND = 2383  # where a member serves clients when its advertised :2379 is a proxy


class Toxiproxy:
    """One `toxiproxy-server` on a loopback address, driven through its HTTP API."""

    def __init__(self, workdir: Path, host: str = "127.0.0.1") -> None:
        build.ensure(build.TOXIPROXY)
        self.host = host
        self.port = free_port(host)
        workdir.mkdir(parents=True, exist_ok=True)
        self.supervisor = procs.Supervisor(workdir)
        binary = build.TOXIPROXY.binary("toxiproxy-server")
        self.proc = self.supervisor.start("toxiproxy", [str(binary), "-host", host, "-port", str(self.port)])
        wait_for(self._answers, 20, f"toxiproxy on {host}:{self.port}")

    def close(self) -> None:
        self.supervisor.stop_all()

    def __enter__(self) -> Toxiproxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _answers(self) -> bool:
        try:
            self._call("GET", "/proxies")
        except OSError:
            return False
        return True

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://{self.host}:{self.port}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            raw = response.read()
        return json.loads(raw) if raw.strip() else None

    def proxy(self, name: str, listen: str, upstream: str) -> None:
        self._call("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream, "enabled": True})

    def latency(self, name: str, one_way_ms: int, jitter_ms: int = 0,
                streams: tuple[str, ...] = ("upstream", "downstream")) -> None:
        """Delay both directions of the proxy's connections (or only `streams`; downstream: server to
        client) by `one_way_ms` (+- jitter)."""
        for stream in streams:
            self._call("POST", f"/proxies/{name}/toxics", {
                "name": f"latency-{stream}", "type": "latency", "stream": stream,
                "attributes": {"latency": one_way_ms, "jitter": jitter_ms},
            })

    def bandwidth(self, name: str, kib_per_s: int, stream: str = "upstream") -> None:
        """Limit one direction of the proxy's connections (upstream: client to server) to `kib_per_s`."""
        self._call("POST", f"/proxies/{name}/toxics", {
            "name": f"bandwidth-{stream}", "type": "bandwidth", "stream": stream,
            "attributes": {"rate": kib_per_s},
        })

    def stall(self, name: str) -> None:
        """Let no byte through either direction of the proxy's connections, and close none of them
        (a `timeout` toxic of 0): a request sent now, or on a connection kept alive, never returns."""
        for stream in ("upstream", "downstream"):
            self._call("POST", f"/proxies/{name}/toxics", {
                "name": f"stall-{stream}", "type": "timeout", "stream": stream, "attributes": {"timeout": 0},
            })

    def set_enabled(self, name: str, enabled: bool) -> None:
        """A disabled proxy stops listening and closes its connections: a partition of the member
        behind it from its peers (refused, not slowed), its client port untouched."""
        self._call("POST", f"/proxies/{name}", {"enabled": enabled})

    def clear(self, name: str) -> None:
        """Remove the proxy's toxics: its connections pass unchanged from now on."""
        for toxic in self._call("GET", f"/proxies/{name}/toxics") or []:
            self._call("DELETE", f"/proxies/{name}/toxics/{toxic['name']}")

    def proxies(self) -> dict[str, Any]:
        return self._call("GET", "/proxies")


def peer_proxy_name(ordinal: int) -> str:
    return f"peer-{ordinal}"


def pod_peer_proxy_name(ip: str) -> str:
    """The proxy `peer_listen` puts in front of a pod runner's member, by the pod's address."""
    return f"peer-{ip}"


def route_peers(lab: Lab, toxiproxy: Toxiproxy, ordinals: Iterable[int], one_way_ms: int = 0,
                jitter_ms: int = 0) -> None:
    """Put a proxy in front of each member's peer port, before the member starts."""
    for ordinal in ordinals:
        ip = lab.ip(ordinal)
        lab.pod(ordinal).env_extra[SidecarEnv.LISTEN_PEER_URL] = f"http://{ip}:{PEER_BEHIND}"
        toxiproxy.proxy(peer_proxy_name(ordinal), f"{ip}:2380", f"{ip}:{PEER_BEHIND}")
        if one_way_ms:
            toxiproxy.latency(peer_proxy_name(ordinal), one_way_ms, jitter_ms)


def client_proxy_name(ordinal: int) -> str:
    return f"client-{ordinal}"


def route_client(lab: Lab, toxiproxy: Toxiproxy, ordinal: int) -> str:
    """Put a proxy in front of a member's client port, before the member starts: everyone, its own
    sidecar too, asks it through the proxy. The URL that reaches the store directly, for the test."""
    ip = lab.ip(ordinal)
    lab.pod(ordinal).env_extra[SidecarEnv.LISTEN_CLIENT_URL] = f"http://{ip}:{CLIENT_BEHIND}"
    toxiproxy.proxy(client_proxy_name(ordinal), f"{ip}:2379", f"{ip}:{CLIENT_BEHIND}")
    return f"http://{ip}:{CLIENT_BEHIND}"


def set_latency(toxiproxy: Toxiproxy, one_way_ms: int, jitter_ms: int = 0) -> None:
    """Every proxy's latency set to `one_way_ms` now (0: the proxy alone). Toxiproxy applies a toxic
    added or removed to the connections already open too, so one cluster is measured at several
    latencies without growing it again for each."""
    for name in toxiproxy.proxies():
        toxiproxy.clear(name)
        if one_way_ms:
            toxiproxy.latency(name, one_way_ms, jitter_ms)


def peer_listen(toxiproxy: Toxiproxy, one_way_ms: int = 0, jitter_ms: int = 0) -> Callable[[str], int]:
    """`route_peers` for the pod runner's members (its `peer_listen` hook): the proxy in front of
    the address's :2380, made once per address (a re-created pod keeps its address and its proxy)."""
    def route(ip: str) -> int:
        name = pod_peer_proxy_name(ip)
        if name not in toxiproxy.proxies():
            toxiproxy.proxy(name, f"{ip}:2380", f"{ip}:{PEER_BEHIND}")
            if one_way_ms:
                toxiproxy.latency(name, one_way_ms, jitter_ms)
        return PEER_BEHIND
    return route
