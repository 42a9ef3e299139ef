"""The cluster's status, computed from the plan, the workload, the Raft membership and the heartbeat records.

Raft says who is a member; heartbeats say who is alive and who leads. `status.members`
joins the two, and `status.disagreements` names where they differ.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from datetime import datetime
from typing import Any

from raftset import contract
from raftset.operator.pure import versions
from raftset.operator.pure import backup_status
from raftset.operator.pure.heartbeats import HeartbeatRecord
from raftset.contract import quorum
from raftset.membership import RaftMember, RaftMembership
from raftset.operator.pure import replace as replacing
from raftset.operator.pure.events import Condition, Event
from raftset.operator.pure.planner import STEP_REASONS, Plan, leader, membership
from raftset.operator.pure.rolls import update_revision
from raftset.operator.pure.spec import Cluster
from raftset.times import parse_rfc3339, rfc3339


# A cluster that is starting, or electing, is unavailable for a moment without being
# degraded; unavailable for longer than this, it is.
UNAVAILABLE_GRACE_SECONDS = 60

PLAINTEXT_WARNING = (
    "spec.tls.provider is disabled: peer and client traffic is plain HTTP, neither encrypted "
    "nor authenticated; anyone who can reach the pods can read and write every key. "
    "Use provider auto or cert-manager for anything but a throwaway cluster.")


def encryption(cluster: Cluster) -> Condition:
    """Encrypted: a standing warning on a plaintext cluster, not a fault (nothing to fix at runtime)."""
    if cluster.tls:
        return Condition("Encrypted", True, "TLS",
                         f"peer and client traffic use TLS (provider {cluster.tls_provider})")
    return Condition("Encrypted", False, "TLSDisabled", PLAINTEXT_WARNING)


def quorum_arithmetic(cluster: Cluster) -> Condition:
    """OddReplicas: a standing warning on an even size, which tolerates no more failures than one less."""
    size, needed = cluster.replicas, quorum(cluster.replicas)
    tolerated = size - needed
    if size % 2:
        return Condition("OddReplicas", True, "OddReplicas",
                         f"{size} members: every write needs {needed}, so {tolerated} may fail")
    return Condition("OddReplicas", False, "EvenReplicas",
                     f"spec.replicas is {size}: every write needs {needed} members, so only {tolerated} may fail, "
                     f"as with {size - 1}; the extra member is one more vote each write waits for and one more "
                     f"machine that can fail. Use {size - 1} or {size + 1}")


def availability(kept: Sequence[int], voters: Sequence[int], heartbeats: Sequence[HeartbeatRecord],
                 now: datetime) -> Condition:
    """Available: a leader, and a quorum of the healthy voters serves linearizable reads.

    Status naming a leader is not enough: an isolated leader before CheckQuorum steps it down, or
    a majority that answers Status but cannot commit, serves no client. `voters` are the kept
    ordinals with a fresh, healthy voter (planner.membership)."""
    current_leader = leader(heartbeats, now)
    needed = quorum(len(kept))
    healthy = f"{len(voters)} of {len(kept)} members healthy"
    if current_leader is None:
        return Condition("Available", False, "NoLeader", "no member reports itself leader")
    if len(voters) < needed:
        return Condition("Available", False, "QuorumLost", f"{healthy}, {needed} needed")
    voting = [m for m in heartbeats if m.fresh(now) and m.ordinal in voters and m.voting and m.healthy]
    serving = {m.ordinal for m in voting if m.ready}
    if len(serving) < needed:
        return Condition("Available", False, "NotServing",
                         f"{healthy} with leader {current_leader.pod}, but {len(serving)} serving linearizable "
                         f"reads, {needed} needed: {_why_not_ready(m for m in voting if m.ordinal not in serving)}")
    return Condition("Available", True, "QuorumHealthy",
                     f"{healthy}, {len(serving)} serving linearizable reads, leader {current_leader.pod}")


def _why_not_ready(heartbeats: Iterable[HeartbeatRecord]) -> str:
    """'demo-0, demo-2: reason; demo-1: other reason', each reason once, in ordinal order."""
    pods: dict[str, list[str]] = {}
    for r in sorted(heartbeats, key=lambda r: r.ordinal):
        pods.setdefault(r.ready_reason or "not ready", []).append(r.pod)
    return "; ".join(f"{', '.join(names)}: {reason}" for reason, names in pods.items())


def conditions(
    cluster: Cluster | None,
    plan: Plan | None,
    heartbeats: Sequence[HeartbeatRecord],
    now: datetime,
    problem: tuple[str, str] | None,
    unavailable_since: datetime | None = None,
    replacements: Sequence[Mapping[str, Any]] = (),
    raft: RaftMembership | None = None,
) -> list[Condition]:
    """Available / Progressing / Degraded (and Encrypted), each with a reason and a message.

    `problem` is (reason, message) for something the user must fix; it makes the cluster
    Degraded without touching what already runs. `unavailable_since` is when Available
    last turned False, if it is False. `raft`, once published, decides who votes.
    """
    degraded = Condition("Degraded", False, "AsExpected", "no problem found")
    if problem is not None:
        degraded = Condition("Degraded", True, *problem)
    if cluster is None or plan is None:
        return [
            Condition("Available", False, "NotReconciled", "the spec could not be rendered"),
            Condition("Progressing", False, "Blocked", "fix the spec to continue"),
            degraded,
            *([encryption(cluster), quorum_arithmetic(cluster)] if cluster is not None else []),
        ]

    kept = plan.kept
    state = membership(kept, heartbeats, now, raft)
    available = availability(kept, state.voters, heartbeats, now)

    if plan.action in STEP_REASONS:
        progressing = Condition("Progressing", True, STEP_REASONS[plan.action], plan.message)
    elif plan.action == "wait" or not state.settled:
        message = plan.message if plan.action == "wait" else state.describe()
        progressing = Condition("Progressing", True, "Waiting", message)
    elif (replacing_message := replacing.under_way(replacements)) is not None:
        progressing = Condition("Progressing", True, "Replacing", replacing_message)
    else:
        progressing = Condition("Progressing", False, "Settled", plan.message)

    blocked = replacing.blocked(replacements)
    if problem is None and plan.stuck:
        degraded = Condition("Degraded", True, plan.stuck, plan.message)
    elif problem is None and plan.refused:
        degraded = Condition("Degraded", True, "ScaleRefused", plan.message)
    elif problem is None and blocked is not None:
        degraded = Condition("Degraded", True, *blocked)
    elif problem is None and available.status is False and unavailable_since is not None \
            and (now - unavailable_since).total_seconds() >= UNAVAILABLE_GRACE_SECONDS:
        degraded = Condition("Degraded", True, available.reason, available.message)
    return [available, progressing, degraded, encryption(cluster), quorum_arithmetic(cluster)]


def merge_conditions(
    old: Sequence[Mapping[str, Any]], new: Sequence[Condition], generation: int, now: datetime,
) -> list[dict[str, Any]]:
    """metav1.Condition dicts; lastTransitionTime moves only when the status flips."""
    previous = {c.get("type"): c for c in old}
    merged = []
    for cond in new:
        status = "Unknown" if cond.status is None else "True" if cond.status else "False"
        before = previous.get(cond.type) or {}
        since = before.get("lastTransitionTime") if before.get("status") == status else None
        merged.append({
            "type": cond.type,
            "status": status,
            "reason": cond.reason,
            "message": cond.message,
            "observedGeneration": generation,
            "lastTransitionTime": since or rfc3339(now),
        })
    return merged


def status(
    cluster: Cluster | None,
    plan: Plan | None,
    workload: Mapping[str, Any] | None,
    heartbeats: Sequence[HeartbeatRecord],
    old_status: Mapping[str, Any],
    generation: int,
    now: datetime,
    problem: tuple[str, str] | None = None,
    *,
    raft: RaftMembership | None = None,
    extra: Sequence[Condition] = (),
    backup: Mapping[str, str] | None = None,
    replacements: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The whole `.status` of a cluster object.

    `extra` conditions (QuorumLost) come from their own modules; `backup` is the backup Lease's
    annotations (raftset.operator.pure.backup_status reads them); `replacements` are
    replacements.rows of the pods.
    """
    if problem is None and cluster is not None:
        problem = backup_status.restore_problem(cluster, backup)
    fresh_heartbeats = [m for m in heartbeats if m.fresh(now)]
    current_leader = leader(heartbeats, now)
    old_available = _condition(old_status, "Available")
    unavailable_since = None
    if old_available.get("status") == "False" and old_available.get("lastTransitionTime"):
        unavailable_since = parse_rfc3339(old_available["lastTransitionTime"])
    workload_status = (workload or {}).get("status") or {}
    current = [*conditions(cluster, plan, heartbeats, now, problem, unavailable_since, replacements, raft), *extra]
    if cluster is not None and cluster.backup:
        current.append(Condition(*backup_status.ready(cluster, backup)))
    out: dict[str, Any] = {
        "observedGeneration": generation,
        "conditions": merge_conditions(old_status.get("conditions") or [], current, generation, now),
    }
    if cluster is not None:
        out.update({
            "selector": contract.label_selector(cluster.name),
            "workloadKind": cluster.backend.name,
        })
    if cluster is not None and plan is not None:
        version = running_version(workload, cluster.engine.name) or old_status.get("version") \
            or (cluster.version if plan.action == "create" else None)
        if version:
            out["version"] = version
    if plan is not None:
        out.update({
            "replicas": int(workload_status.get("replicas", plan.replicas)),
            "readyReplicas": int(workload_status.get("readyReplicas", 0)),
            "reservedOrdinals": list(plan.reserved),
        })
    out["leader"] = current_leader.pod if current_leader else ""
    name = cluster.name if cluster is not None else ""
    out["members"] = member_rows(raft, fresh_heartbeats, name)
    out["disagreements"] = disagreements(raft, plan.kept if plan is not None else None, fresh_heartbeats, name)
    out["replacements"] = [dict(r) for r in replacements]
    if cluster is not None and cluster.backup:
        out["backup"] = backup_status.section(backup)
    return out


def _pod_of(m: RaftMember, cluster: str) -> str:
    """The pod a member belongs to; its own name (or id) where the cluster or ordinal is unknown."""
    if cluster and m.ordinal is not None:
        return contract.pod_name(cluster, m.ordinal)
    return m.name or m.id


def _raft_role(m: RaftMember, raft: RaftMembership) -> str:
    if m.learner:
        return contract.ROLE_LEARNER
    if m.id == raft.leader_id:
        return contract.ROLE_LEADER
    return contract.ROLE_FOLLOWER if m.started else contract.ROLE_UNKNOWN


def member_rows(raft: RaftMembership | None, heartbeats: Sequence[HeartbeatRecord], cluster: str) -> list[dict[str, Any]]:
    """One row per Raft member (role and learner from Raft, health from its heartbeat, lag from
    the raft indexes the leader saw), then the fresh heartbeats of pods Raft does not list."""
    by_member = {h.member_id: h for h in heartbeats}
    rows: list[dict[str, Any]] = []
    if raft is not None:
        leader_index = next((m.raft_index for m in raft.members if m.id == raft.leader_id), None)
        for m in sorted(raft.members, key=lambda m: (m.ordinal is None, m.ordinal or 0, m.id)):
            beat = by_member.pop(m.id, None)
            name = _pod_of(m, cluster)
            if any(r["name"] == name for r in rows):  # a second entry for one pod: the names must stay unique
                name = f"{name}/{m.id}"
            row: dict[str, Any] = {
                "name": name,
                "id": m.id, "role": _raft_role(m, raft), "learner": m.learner, "inRaft": True,
                "healthy": bool(beat and beat.healthy),
                "ready": bool(beat and beat.ready),
            }
            if leader_index is not None and m.raft_index is not None:
                row["indexLag"] = max(0, leader_index - m.raft_index)
            if beat is not None:
                row["lastHeartbeat"] = rfc3339(beat.renewed)
            rows.append(row)
    listed = {r["name"] for r in rows}
    for h in heartbeats:
        if h.member_id in by_member and h.pod not in listed:
            row = {"name": h.pod, "id": h.member_id, "role": h.role, "learner": h.role == contract.ROLE_LEARNER,
                   "healthy": h.healthy, "ready": h.ready, "lastHeartbeat": rfc3339(h.renewed)}
            if raft is not None:  # without a published membership, whether it is in Raft is unknown
                row["inRaft"] = False
            rows.append(row)
    return rows


def disagreements(raft: RaftMembership | None, kept: Sequence[int] | None, heartbeats: Sequence[HeartbeatRecord],
                  cluster: str) -> list[str]:
    """Where Raft, the workload and the heartbeats differ, one sentence each."""
    if raft is None:
        return []
    out = []
    for m in raft.members:
        if m.ordinal is None:
            out.append(f"member {m.id} ({m.name or 'never started'}) is in Raft under a name no pod of "
                       f"this cluster has; it is left alone")
        elif kept is not None and m.ordinal not in kept:
            out.append(f"member {m.id} of {_pod_of(m, cluster)} is in Raft, but the workload runs no pod "
                       f"for ordinal {m.ordinal}: membership-clean removes it after its grace period")
    ordinals = {m.ordinal for m in raft.members}
    out += [f"{contract.pod_name(cluster, o)} runs no Raft member" for o in (kept or []) if o not in ordinals]
    ids = {m.id for m in raft.members}
    out += [f"{h.pod} reports member {h.member_id}, which Raft does not list"
            for h in heartbeats if h.member_id and h.member_id not in ids]
    return out


def running_version(workload: Mapping[str, Any] | None, container: str) -> str | None:
    """The store version every pod runs: known once the controller has rolled the whole template."""
    if workload is None:
        return None
    st = workload.get("status") or {}
    if update_revision(workload) is None or int(st.get("updatedReplicas") or 0) < int(st.get("replicas") or 0):
        return None
    template = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    image = next((c.get("image", "") for c in template.get("containers") or [] if c.get("name") == container), "")
    return versions.of_image(image)


def _condition(st: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return next((c for c in st.get("conditions") or [] if c.get("type") == kind), {})


def degraded(st: Mapping[str, Any]) -> bool:
    """Does this status say Degraded=True?"""
    return _condition(st, "Degraded").get("status") == "True"


def announcements(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Event]:
    """(event type, reason, message) for what a user wants to hear once, not every reconcile."""
    out: list[Event] = []
    if new.get("leader") and old.get("leader") and new["leader"] != old["leader"]:
        out.append(Event("Normal", "LeaderChanged", f"leader moved from {old['leader']} to {new['leader']}"))
    out += _warnings(old, new, ("Degraded", "True"))
    if _condition(new, "Degraded").get("status") == "False" and _condition(old, "Degraded").get("status") == "True":
        out.append(Event("Normal", "Recovered", "the cluster is no longer degraded"))
    out += backup_status.announcements(old.get("backup") or {}, new.get("backup") or {})
    out += _warnings(old, new, *STANDING_WARNINGS)
    return out


# Conditions that are False for a choice in the spec, not a fault: one Warning when they turn False.
STANDING_WARNINGS = (("Encrypted", "False"), ("OddReplicas", "False"))


def _warnings(old: Mapping[str, Any], new: Mapping[str, Any], *watched: tuple[str, str]) -> list[Event]:
    """One Warning per (condition, status) that `new` has and `old` had not, with that message."""
    out = []
    for kind, status in watched:
        after, before = _condition(new, kind), _condition(old, kind)
        if after.get("status") == status and (before.get("status"), before.get("message")) != (
                status, after.get("message")):
            out.append(Event("Warning", after.get("reason", kind), after.get("message", "")))
    return out


# Fields that move on every heartbeat renewal without anything a user acts on changing.
RENEWAL_FIELDS = ("lastHeartbeat",)


def _without_renewals(st: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(st)
    if "members" in out:
        out["members"] = [{k: v for k, v in row.items() if k not in RENEWAL_FIELDS} for row in out["members"] or []]
    return out


def patch_due(old: Mapping[str, Any], new: Mapping[str, Any], now: datetime, refresh_seconds: float) -> bool:
    """Does `new` need a status patch over `old` (the status the object shows)?

    Anything a user or a tool acts on (conditions, roles, health, sizes) is written at once.
    A change in heartbeat renewal times alone is written only once the time shown is
    `refresh_seconds` old: every sidecar renews every few seconds, and a patch per renewal
    is a write and a watch event per cluster per renewal, which at hundreds of clusters
    costs the apiserver and the operator more than all else they do at rest.
    """
    if {k: old.get(k) for k in new} == dict(new):
        return False
    steady_old, steady_new = _without_renewals(old), _without_renewals(new)
    if {k: steady_old.get(k) for k in new} != steady_new:
        return True
    for before, after in zip(old.get("members") or [], new.get("members") or []):
        for field in RENEWAL_FIELDS:
            if before.get(field) == after.get(field):
                continue
            shown = parse_rfc3339(before.get(field))
            if shown is None or (now - shown).total_seconds() >= refresh_seconds:
                return True
    return False
