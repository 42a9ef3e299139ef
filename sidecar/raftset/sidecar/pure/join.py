"""How a member joins: the pure decision and the startup configuration it implies.

Inputs are plain data the shell gathered (data dir, marker, MemberList if any member
answered); the output says what to do. The shell carries out one step and decides again,
so a crash between steps is never worse than a fresh start.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from raftset import contract
from raftset.engines import StartupConfig, TLSFiles
from raftset.sidecar.pure.etcd import Member, Status

from raftset.sidecar.pure.config import Naming
from raftset.sidecar.pure.marker import Marker


class JoinAction(Enum):
    BOOTSTRAP = "bootstrap"  # a new cluster: start with state new (alone, or with the initial set)
    REJOIN = "rejoin"  # our data dir belongs to a current member: just start
    ADD_LEARNER = "add-learner"  # MemberAdd as learner, then start with state existing
    REUSE_ENTRY = "reuse-entry"  # an unstarted entry with our peer URL exists: start as it
    REMOVE_ENTRY = "remove-entry"  # the cluster lists us as started, but we have no data
    MOVE_ASIDE = "move-aside"  # stale data dir (its member is gone): move it, join fresh
    WAIT = "wait"  # nothing safe to do now; try again after a backoff


@dataclass(frozen=True)
class JoinView:
    """What the sidecar knows when it decides how to join."""

    name: str
    ordinal: int
    peer_url: str
    kept: Sequence[int]  # ordinals the workload runs
    has_data: bool
    marker: Marker | None
    members: Sequence[Member] | None  # None: no member answered
    cluster_evidence: bool  # other members' heartbeat records exist: a cluster was created
    # `members` is a linearizable answer (or the leader's own view): only such an answer may
    # move data aside or remove an entry; a lagging member's list may simply not show us yet.
    linearizable: bool = False
    # The member id our own store answers Status as, while it runs; None when it does not answer.
    local_member: int | None = None
    # The engine may start a new cluster from one member (Capabilities.bootstrap_alone). When it
    # may not, the kept ordinals of a workload whose cluster does not exist yet are its initial
    # set: each bootstraps with `initial_peers` (pod name -> peer URL of every kept ordinal).
    bootstrap_alone: bool = True
    initial_peers: Mapping[str, str] = field(default_factory=dict)
    # Some member has had a leader or committed an entry (a Status answered so, or a heartbeat
    # Lease says so): the cluster was formed, and no initial member may bootstrap it again.
    formed: bool = False


@dataclass(frozen=True)
class JoinDecision:
    action: JoinAction
    reason: str
    member_id: int | None = None  # the entry to reuse or remove


def cluster_evidence(leases: Sequence[Mapping[str, Any]], name: str) -> bool:
    """Another pod's heartbeat Lease exists: a cluster was created, so ours is not the first bootstrap."""
    return any((lease.get("spec") or {}).get("holderIdentity") not in (None, name) for lease in leases)


def cluster_formed(leases: Sequence[Mapping[str, Any]], name: str, statuses: Sequence[Status]) -> bool:
    """A member other than us has had a leader or committed an entry, by its Status now or its heartbeat Lease."""
    if any(st.leader != 0 or st.raft_index > 0 for st in statuses):
        return True
    for lease in leases:
        if (lease.get("spec") or {}).get("holderIdentity") in (None, name):
            continue
        text = ((lease.get("metadata") or {}).get("annotations") or {}).get(contract.ANNOTATION_HEARTBEAT) or "{}"
        try:
            beat = json.loads(text)
        except ValueError:
            return True  # unreadable: assume the worst
        if not isinstance(beat, dict) or beat.get("healthy") or int(beat.get("raft_index") or 0) > 0:
            return True
    return False


def own_entry(view: JoinView) -> Member | None:
    """Our entry in MemberList: by the marker's id, else by peer URL."""
    members = view.members or ()
    if view.marker is not None:
        for m in members:
            if m.id == view.marker.member_id:
                return m
    for m in members:
        if view.peer_url in m.peer_urls:
            return m
    return None


DESTRUCTIVE = frozenset({JoinAction.MOVE_ASIDE, JoinAction.REMOVE_ENTRY})


def decide(view: JoinView) -> JoinDecision:
    """One step. A member that runs is never moved aside or removed by its own sidecar (fault b)."""
    live = view.local_member
    if live is not None:
        if view.members is None or any(m.id == live for m in view.members):
            return JoinDecision(JoinAction.REJOIN, f"our store runs as member {live:x}: keep it", live)
        return JoinDecision(JoinAction.WAIT, f"our store still runs as member {live:x}, which the cluster no longer "
                                         f"lists: waiting for it to stop before its data dir is touched")
    decision = _with_data(view) if view.has_data else _without_data(view)
    if decision.action in DESTRUCTIVE and not view.linearizable:
        return JoinDecision(JoinAction.WAIT, f"{decision.reason}; but only a linearizable membership may decide "
                                         f"{decision.action.value}: asking again")
    return decision


def _with_data(view: JoinView) -> JoinDecision:
    if view.members is None:
        # A whole-cluster restart looks like this: every member must start from its data.
        return JoinDecision(JoinAction.REJOIN, "no member answered; starting from the existing data dir")
    entry = own_entry(view)
    if entry is not None and (view.marker is None or entry.id == view.marker.member_id):
        if entry.started and entry.name != view.name:
            return JoinDecision(JoinAction.MOVE_ASIDE, f"member {entry.hex_id} with our peer URL is named {entry.name!r}")
        return JoinDecision(JoinAction.REJOIN, f"data dir belongs to current member {entry.hex_id}", entry.id)
    if view.marker is None:
        return JoinDecision(JoinAction.MOVE_ASIDE, "data dir without marker and no member with our peer URL")
    return JoinDecision(
        JoinAction.MOVE_ASIDE, f"data dir belongs to member {view.marker.member_id:x}, which is no longer in the cluster"
    )


def _without_data(view: JoinView) -> JoinDecision:
    if not view.bootstrap_alone:
        together = _bootstrap_together(view)
        if together is not None:
            return together
    if view.members is None:
        first = min(view.kept) if view.kept else 0
        if view.bootstrap_alone and view.ordinal == first and not view.cluster_evidence:
            return JoinDecision(JoinAction.BOOTSTRAP, f"ordinal {view.ordinal} is the first and no cluster exists yet")
        if view.cluster_evidence:
            return JoinDecision(JoinAction.WAIT, "members of this cluster exist but none answered")
        if not view.bootstrap_alone:
            return JoinDecision(JoinAction.WAIT, "no member answered, and this member may not bootstrap: waiting for "
                                             "the cluster to answer")
        return JoinDecision(JoinAction.WAIT, f"waiting for the first member (ordinal {first}) to bootstrap the cluster")
    entry = own_entry(view)
    if entry is not None:
        if not entry.started:
            return JoinDecision(JoinAction.REUSE_ENTRY, f"unstarted member {entry.hex_id} has our peer URL", entry.id)
        return JoinDecision(
            JoinAction.REMOVE_ENTRY, f"member {entry.hex_id} ({entry.name}) has our peer URL but our data dir is empty",
            entry.id,
        )
    pending = [m for m in view.members if m.is_learner or not m.started]
    if pending:
        return JoinDecision(JoinAction.WAIT, f"member {pending[0].hex_id} is still joining; one membership change at a time")
    return JoinDecision(JoinAction.ADD_LEARNER, "joining the running cluster as a learner")


def _bootstrap_together(view: JoinView) -> JoinDecision | None:
    """For an engine that cannot bootstrap alone: start the initial set, all with state new, while
    no cluster exists yet; None where the usual rules decide (join a running cluster, or wait).

    No cluster exists yet when nobody answers and no other pod's heartbeat Lease exists (then the
    kept ordinals are the initial set), or when the members that answer never had a leader nor
    committed an entry (then the set they list is the initial set, whatever the workload keeps now:
    the first to bootstrap chose it). A member with a marker ran before: it lost its data and must
    never bootstrap again.
    """
    if view.marker is not None or view.formed:
        return None
    if view.members is None:
        if view.cluster_evidence or view.ordinal not in view.kept or view.peer_url not in view.initial_peers.values():
            return None
        together = ", ".join(sorted(view.initial_peers))
        return JoinDecision(JoinAction.BOOTSTRAP, f"no cluster exists yet: {together} bootstrap together")
    listed = _listed(view.members)
    if listed is None or view.peer_url not in listed.values():
        return JoinDecision(JoinAction.WAIT, "the cluster has not formed yet and does not list us as an initial member: "
                                         "waiting for it to form")
    return JoinDecision(JoinAction.BOOTSTRAP, f"the initial members answer but never had a leader: "
                                          f"{', '.join(sorted(listed))} bootstrap together")


def _listed(members: Sequence[Member]) -> dict[str, str] | None:
    """Name -> peer URL of an unformed cluster's initial members; None if it lists anything else."""
    if any(m.is_learner or not m.name or not m.peer_urls for m in members):
        return None
    return {m.name: m.peer_urls[0] for m in members}


def bootstrap_cluster(view: JoinView) -> dict[str, str]:
    """The member list a BOOTSTRAP starts with: ourselves alone, the answering initial members, or the
    kept ordinals."""
    if view.bootstrap_alone:
        return {view.name: view.peer_url}
    return _listed(view.members or ()) or dict(view.initial_peers)


@dataclass(frozen=True)
class StartupInputs:
    """Everything besides the plan that goes into the store's startup file."""

    name: str
    naming: Naming
    data_dir: str
    peer_url: str
    client_url: str
    listen_peer_url: str
    listen_client_url: str
    cluster_token: str
    tls: TLSFiles | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    listen_metrics_url: str = ""


def initial_cluster(
    name: str, peer_url: str, members: Sequence[Member], naming: Naming, own_id: int | None,
) -> dict[str, str]:
    """name -> peer URL for every member, ours included; etcd checks the count and URLs.

    Unstarted members have no name yet: they get their pod's name (or their id).
    """
    out: dict[str, str] = {}
    for m in members:
        if m.id == own_id or peer_url in m.peer_urls or not m.peer_urls:
            continue
        ordinal = naming.ordinal_of_member(m.name, m.peer_urls)
        label = m.name or (naming.pod(ordinal) if ordinal is not None else f"member-{m.hex_id}")
        out[label] = m.peer_urls[0]
    out[name] = peer_url
    return out


def rejoin_cluster(view: JoinView, member_id: int | None, naming: Naming) -> dict[str, str]:
    """The cluster map a REJOIN starts with: the live membership, else the marker's, else ourselves alone.

    etcd ignores the map when the data dir holds membership; it matters for a data dir
    whose member never finished its first start.
    """
    if view.members:
        return initial_cluster(view.name, view.peer_url, view.members, naming, member_id)
    if view.marker is not None and view.marker.initial_cluster:
        return dict(view.marker.initial_cluster)
    return {view.name: view.peer_url}


def startup_config(
    inputs: StartupInputs, state: str, cluster: Mapping[str, str],
) -> StartupConfig:
    return StartupConfig(
        name=inputs.name,
        data_dir=inputs.data_dir,
        peer_url=inputs.peer_url,
        client_url=inputs.client_url,
        listen_peer_url=inputs.listen_peer_url,
        listen_client_url=inputs.listen_client_url,
        initial_cluster=dict(cluster),
        state=state,
        cluster_token=inputs.cluster_token,
        tls=inputs.tls,
        options=dict(inputs.options),
        listen_metrics_url=inputs.listen_metrics_url,
    )
