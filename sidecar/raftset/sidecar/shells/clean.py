"""The membership-clean shell: only the leader's sidecar acts, one removal per round, under the lock.

A member that does not answer is looked up on its pod: for the operator's node-lost mark
(raftset.nodeloss; one removed for that is recorded on the same pod, for the operator to
re-create the pod elsewhere), or for the pod's absence. A pod that cannot be read ends the
round: no evidence, no removal.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timezone

from raftset import contract, nodeloss
from raftset.times import rfc3339

from raftset.sidecar.io.etcdclient import EtcdClientError, Member
from raftset.sidecar.io.peers import Peers
from raftset.sidecar.metrics import STEP_CLEAN, Metrics
from raftset.sidecar.pure import clean
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.state import State
from raftset.sidecar.shells.plumbing import LOCK_NAME
from raftset.workloads import being_deleted

log = logging.getLogger("raftset.sidecar")


class CleanShell:
    """Leader-only (the app's loop table). Port: `hold`, the test-only hold at a named point (Loops.test_hold)."""

    def __init__(self, settings: SidecarConfig, state: State, peers: Peers, metrics: Metrics, *,
                 hold: Callable[[str], Awaitable[None]]) -> None:
        self.settings, self.state, self.peers, self.metrics = settings, state, peers, metrics
        self.hold = hold
        self.absent_since: dict[int, float] = {}
        self.lost: dict[int, str] = {}  # absent members whose pods carry the node-lost mark: id -> pod
        self.gone: set[int] = set()  # absent members whose pods the API does not have
        self.unrecorded: dict[str, nodeloss.Removal] = {}  # removals not yet written on their pods

    def not_leading(self) -> None:
        self.absent_since = {}  # a new leader starts the clock afresh

    async def round(self) -> None:
        settings = self.settings
        workload = await self.peers.workload()
        if workload is None or being_deleted(workload):
            return
        kept = settings.backend.kept(workload)
        await self._record_removals()
        now = time.monotonic()
        members = await self.peers.local.member_list()
        decision = await self._decide(members, kept, now, track=True)
        log.debug("clean: %s", decision.reason)
        if decision.remove is None:
            self.metrics.outcome(STEP_CLEAN, "none")
            return
        async with self.peers.local.lock(LOCK_NAME, timeout=10) as held:
            await self.hold("clean-locked")
            again = await self._decide(await self.peers.local.member_list(), kept, now, track=False)
            if again.remove != decision.remove:
                self.metrics.outcome(STEP_CLEAN, "changed")
                return
            await held.fence(self.peers.local.timeout)  # LockLost unless the lock outlives the MemberRemove
            try:
                await self.peers.local.remove(decision.remove)
            except EtcdClientError:
                self.metrics.count("clean_remove", False)
                self.metrics.outcome(STEP_CLEAN, "error")
                raise
        self.metrics.count("clean_remove", True)
        self.metrics.outcome(STEP_CLEAN, "removed")
        self.absent_since.pop(decision.remove, None)
        log.warning("clean: removed member %x (ordinal %s): %s", decision.remove,
                    self.peers.ordinals(members).get(decision.remove), decision.reason)
        if (pod := self.lost.get(decision.remove)) is not None:
            self.unrecorded[pod] = nodeloss.Removal(f"{decision.remove:x}", settings.pod_name,
                                                    rfc3339(datetime.now(timezone.utc)), decision.reason)
            await self._record_removals()

    async def _record_removals(self) -> None:
        """Each removal of a member lost with its node, on its pod: the operator deletes the pod and its
        claim only on this record. A failed write is tried again next round."""
        for pod, removal in list(self.unrecorded.items()):
            try:
                await self.peers.kube.annotate_pod(pod, {contract.ANNOTATION_NODE_LOST_REMOVAL: removal.to_json()})
            except Exception as exc:  # noqa: BLE001 - the API may be away; the record waits for the next round
                log.error("clean: could not record on %s that member %s was removed: %s", pod, removal.member, exc)
                return
            del self.unrecorded[pod]

    async def _read_pods(self, members: Sequence[Member], answering: frozenset[int],
                         ordinals: Mapping[int, int | None]) -> None:
        """Which members that do not answer have pods marked lost with their node (`lost`), and which
        have no pod at all (`gone`). Only those pods are read: a cluster whose members all answer
        costs no API call."""
        self.lost, self.gone = {}, set()
        for m in members:
            ordinal = ordinals.get(m.id)
            if m.id in answering or ordinal is None:
                continue
            pod_name = contract.pod_name(self.settings.workload_name, ordinal)
            pod = await self.peers.kube.pod(pod_name)
            if pod is None:
                self.gone.add(m.id)
                continue
            annotations = (pod.get("metadata") or {}).get("annotations") or {}
            if nodeloss.parse_mark(annotations.get(contract.ANNOTATION_NODE_LOST)) is not None:
                self.lost[m.id] = pod_name

    async def _decide(self, members: Sequence[Member], kept: Sequence[int], now: float, *,
                      track: bool) -> clean.CleanDecision:
        """clean.decide on what the members answer now; `track` moves the absence clock first."""
        statuses = await self.peers.statuses(members)
        answering = frozenset(i for i, st in statuses.items() if st is not None)
        if track:
            self.absent_since = clean.absences(self.absent_since, members, answering, now)
        ordinals = self.peers.ordinals(members)
        await self._read_pods(members, answering, ordinals)
        return clean.decide(leading=True, members=members, ordinal_of=ordinals, kept=kept,
                            absent_since=self.absent_since, answering=answering, now=now,
                            grace=self.settings.clean_grace, lost=frozenset(self.lost), gone=frozenset(self.gone))
