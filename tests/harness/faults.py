"""The fault catalog (issue 27, item 3), so far for the `etcd` tier's lab: one context manager per
fault, which injects it on entry and ends it on exit (as kubelet, or the network, would).

Present: SIGKILL of a member's store (the leader's or a follower's) and of a sidecar, a store
paused (SIGSTOP) past the election timeout, and a sidecar's Lease writes refused by the API while
Raft is healthy, a sidecar's clock skewed (libfaketime), and a member's data volume full (a
size-limited tmpfs: mounting needs root, as the lab's loopback addresses do), and a member cut
off from the leader (Toxiproxy), and the operator's SIGKILL (the e2e tier's operator; none runs in
the lab). Not yet: a member cut off from every peer (the lab's one Toxiproxy per member's peer port cuts only links
whose both ends are proxied, and every member dials from 127.0.0.1); nor `make run` and real nodes.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager

from tests.harness import quorum
from tests.harness.lab import Lab
from tests.harness.operator import Operator
from tests.harness.toxiproxy import Toxiproxy, peer_proxy_name, route_peers
from tools.devcluster import podfaults


@contextmanager
def _killed(lab: Lab, ordinal: int, container: str, restart: str) -> Iterator[None]:
    """SIGKILL of one container of the pod, no preStop hook; on exit kubelet starts it again in
    the same pod (same volumes); the other container keeps running."""
    pod = lab.pod(ordinal)
    proc = getattr(pod.containers, container)
    assert proc is not None and proc.alive(), f"ordinal {ordinal}: no {container} running to kill"
    pod.containers.supervisor.kill(proc)
    try:
        yield
    finally:
        getattr(pod, restart)()


def store_killed(lab: Lab, ordinal: int) -> AbstractContextManager[None]:
    """A crash of the store: same data, same member when it starts again. The sidecar keeps running."""
    return _killed(lab, ordinal, "store", "start_store")


def sidecar_killed(lab: Lab, ordinal: int) -> AbstractContextManager[None]:
    """A crash of the sidecar: its emptyDir, and so its startup file, kept. The store keeps running."""
    return _killed(lab, ordinal, "sidecar", "restart_sidecar")


@contextmanager
def store_paused(lab: Lab, ordinal: int, at_least: float) -> Iterator[None]:
    """A frozen store (a stalled process or VM): SIGSTOP, so it answers neither peers nor clients,
    for at least `at_least` seconds (give more than the election timeout for a paused leader to be
    replaced); SIGCONT on exit."""
    store = lab.pod(ordinal).store
    assert store is not None and store.poll() is None, f"ordinal {ordinal}: no store running to pause"
    os.kill(store.pid, signal.SIGSTOP)
    until = time.monotonic() + at_least
    try:
        yield
        time.sleep(max(0.0, until - time.monotonic()))
    finally:
        os.kill(store.pid, signal.SIGCONT)


@contextmanager
def leases_refused(lab: Lab, ordinal: int) -> Iterator[None]:
    """A sidecar's path to the API cut: every write of its heartbeat Lease refused (an admission
    policy), while the store and Raft carry on. Entered once a write is refused, left once one passes."""
    with quorum.lease_writes_refused(lab.core.api_client, lab.namespace, [lab.pod(ordinal).name]):
        yield


def skewable_clocks(lab: Lab, ordinals: Iterable[int]) -> None:
    """Before these pods start: their sidecars run under libfaketime (`podfaults.skewable_clock`)."""
    for ordinal in ordinals:
        pod = lab.pod(ordinal)
        pod.env_extra.update(podfaults.skewable_clock(pod.root / podfaults.CLOCK_OFFSET_FILE))


@contextmanager
def clock_skewed(lab: Lab, ordinal: int, seconds: int) -> Iterator[None]:
    """A sidecar's wall clock `seconds` ahead (behind, if negative); true again on exit.
    Needs `skewable_clocks` before the pod started."""
    offset = lab.pod(ordinal).root / podfaults.CLOCK_OFFSET_FILE
    podfaults.skew(offset, seconds)
    try:
        yield
    finally:
        podfaults.skew(offset, 0)


@contextmanager
def small_volumes(lab: Lab, ordinals: Iterable[int], size_mb: int) -> Iterator[None]:
    """Before these pods start: each one's data volume a tmpfs of `size_mb`, so that `volume_full`
    can fill it. Unmounted lazily on exit."""
    mounted = []
    try:
        for ordinal in ordinals:
            volume = lab.pod(ordinal).data_dir.parent
            podfaults.mount_small(volume, size_mb)
            mounted.append(volume)
        yield
    finally:
        for volume in mounted:
            podfaults.unmount(volume)


@contextmanager
def volume_full(lab: Lab, ordinal: int) -> Iterator[None]:
    """A member's data volume full: a ballast file takes every free byte (`small_volumes` first). On
    exit the ballast goes, and kubelet starts the store again if the full disk made it exit."""
    pod = lab.pod(ordinal)
    ballast = podfaults.fill(pod.data_dir.parent)
    try:
        yield
    finally:
        ballast.unlink()
        store = pod.containers.store
        if store is None or not store.alive():
            pod.start_store()


@contextmanager
def peers_proxied(lab: Lab, ordinals: Iterable[int]) -> Iterator[Toxiproxy]:
    """Before these pods start: a Toxiproxy in front of each one's peer port, for `cut_off`."""
    with Toxiproxy(lab.workdir / "toxiproxy") as proxy:
        route_peers(lab, proxy, ordinals)
        yield proxy


@contextmanager
def cut_off(proxy: Toxiproxy, ordinal: int, leader: int) -> Iterator[None]:
    """`ordinal` and the leader exchange nothing; the third member still hears both. etcd peers dial
    each other both ways and a stream carries both directions, so a link is cut only where the
    proxies of both ends are: these two go, the third's carries the rest. Clients still reach
    `ordinal`: its serializable reads lag, its linearizable ones cannot reach the leader."""
    with links_cut(proxy, (peer_proxy_name(ordinal), peer_proxy_name(leader))):
        yield


@contextmanager
def links_cut(proxy: Toxiproxy, names: Iterable[str]) -> Iterator[None]:
    """`cut_off` by the proxies' names: the links between the members behind them cut, each of them
    still linked to a member whose proxy stays (the pod runner's members: toxiproxy.peer_listen)."""
    names = tuple(names)
    for name in names:
        proxy.set_enabled(name, False)
    try:
        yield
    finally:
        for name in names:
            proxy.set_enabled(name, True)


@contextmanager
def operator_killed(operator: Operator, down_for: float = 2.0) -> Iterator[None]:
    """SIGKILL of the operator (no finalizer runs, no step is finished), its next replica started
    `down_for` seconds later on exit, as its Deployment would: it must resume from the API alone.
    The e2e tier's operator (tests/harness/operator.py); no operator runs in the `etcd` tier's lab."""
    assert operator.alive(), "no operator running to kill"
    operator.kill()
    until = time.monotonic() + down_for
    try:
        yield
        time.sleep(max(0.0, until - time.monotonic()))
    finally:
        operator.start()
