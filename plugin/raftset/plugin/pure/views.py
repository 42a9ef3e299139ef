"""What each verb shows, as plain data built from what the API returned (no API calls here).

Every view is a JSON-ready dict: `-o json` prints it as it is, raftset.plugin.pure.text renders it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from raftset import backups, contract, membership
from raftset import quorum_loss
from raftset.operator.pure import quorum_loss as quorum_loss_decision
from raftset.operator.pure import replace
from raftset.operator.pure.heartbeats import from_leases
from raftset.times import parse_rfc3339, rfc3339

# The value of each condition when nothing needs a person (Progressing=True is work, not a problem).
NOMINAL = {"Available": "True", "Degraded": "False", "QuorumLost": "False", "Progressing": "False",
           "Encrypted": "True", "OddReplicas": "True", "BackupReady": "True"}
# Conditions whose off-nominal value means the cluster does not serve as it should.
TROUBLE = ("Available", "Degraded", "QuorumLost")


def conditions(obj: Mapping[str, Any]) -> list[dict[str, str]]:
    return [{k: str(c.get(k) or "") for k in ("type", "status", "reason", "message", "lastTransitionTime")}
            for c in (obj.get("status") or {}).get("conditions") or []]


def condition(obj: Mapping[str, Any], kind: str) -> dict[str, str]:
    return next((c for c in conditions(obj) if c["type"] == kind), {})


def serving(obj: Mapping[str, Any]) -> bool:
    """Available and not Degraded: what `status` and `why` exit 0 on."""
    return condition(obj, "Available").get("status") == "True" and condition(obj, "Degraded").get("status") != "True"


def age(then: datetime | None, now: datetime) -> str:
    """kubectl's way: 42s, 3m, 5h, 2d; empty when unknown."""
    if then is None:
        return ""
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _identity(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    return {"kind": str(obj.get("kind") or ""), "name": str(meta.get("name") or ""),
            "namespace": str(meta.get("namespace") or "")}


def activity(obj: Mapping[str, Any]) -> list[str]:
    """What the operator is doing now and why, in its own words (conditions and status)."""
    meta, st = obj.get("metadata") or {}, obj.get("status") or {}
    out = []
    generation, observed = meta.get("generation"), st.get("observedGeneration")
    if generation is not None and observed is not None and int(observed) < int(generation):
        out.append(f"the operator has not acted on the latest spec yet (generation {generation}, "
                   f"observed {observed})")
    progressing = condition(obj, "Progressing")
    if progressing.get("status") == "True":
        out.append(f"{progressing['reason']}: {progressing['message']}")
    lost = condition(obj, "QuorumLost")
    if lost and lost.get("status") != "False":
        out.append(f"QuorumLost={lost['status']} ({lost['reason']}): {lost['message']}")
    under_way = replace.under_way(st.get("replacements") or [])
    if under_way and under_way not in progressing.get("message", ""):  # Progressing may already say it
        out.append(under_way)
    out += [str(d) for d in st.get("disagreements") or []]
    if not out:
        out.append(f"nothing: {progressing['message']}" if progressing.get("message") else "nothing")
    return out


def status_view(obj: Mapping[str, Any], nodes: Mapping[str, str], now: datetime,
                leases: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """`status NAME`: the members (status.members with the node each pod runs on), conditions, activity.

    A member's heartbeat is read from its Lease when one is given: the status refreshes renewal
    times only every RAFTSET_STATUS_REFRESH_SECONDS, so its own `lastHeartbeat` may be minutes old."""
    ident, spec, st = _identity(obj), obj.get("spec") or {}, obj.get("status") or {}
    renewed = {b.pod: b.renewed for b in from_leases(lease for lease in leases if contract.LABEL_HEARTBEAT in
                                                     ((lease.get("metadata") or {}).get("labels") or {}))}
    members = []
    for row in st.get("members") or []:
        name = str(row.get("name") or "")
        beat = renewed.get(name.split("/")[0]) or parse_rfc3339(row.get("lastHeartbeat"))
        members.append({
            "name": name, "ordinal": contract.member_ordinal(ident["name"], name.split("/")[0]),
            "id": str(row.get("id") or ""), "role": str(row.get("role") or ""), "learner": bool(row.get("learner")),
            "inRaft": row.get("inRaft"), "indexLag": row.get("indexLag"), "healthy": bool(row.get("healthy")),
            "ready": bool(row.get("ready")), "node": nodes.get(name.split("/")[0], ""),
            "lastHeartbeat": rfc3339(beat) if beat else "", "heartbeatAge": age(beat, now)})
    return {**ident, "version": str(st.get("version") or spec.get("version") or ""),
            "workloadKind": str(st.get("workloadKind") or spec.get("workloadKind") or ""),
            "desired": spec.get("replicas"), "replicas": st.get("replicas"), "readyReplicas": st.get("readyReplicas"),
            "leader": str(st.get("leader") or ""), "members": members, "conditions": conditions(obj),
            "activity": activity(obj), "serving": serving(obj)}


def diagnosis(obj: Mapping[str, Any]) -> list[str]:
    """One sentence per condition off its nominal value, the ones that stop service first."""
    off = [c for c in conditions(obj) if c["type"] in NOMINAL and c["status"] != NOMINAL[c["type"]]]
    off.sort(key=lambda c: (c["type"] not in TROUBLE, c["type"] == "Progressing"))
    out = []
    for c in off:
        if c["type"] == "Progressing":
            out.append(f"busy ({c['reason']}): {c['message']}")
        else:
            out.append(f"{c['type']} is {c['status']} ({c['reason']}): {c['message']}")
    if not conditions(obj):
        out.append("the operator has published no conditions yet: is it running?")
    return out


def event_rows(events: Iterable[Mapping[str, Any]], now: datetime, limit: int) -> list[dict[str, Any]]:
    """The newest `limit` Events (plain dicts of core/v1 Events), newest first."""
    rows = []
    for e in events:
        when = parse_rfc3339(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp")
                             or (e.get("metadata") or {}).get("creationTimestamp"))
        involved = e.get("involvedObject") or {}
        rows.append({"time": when.isoformat() if when else "", "age": age(when, now), "type": str(e.get("type") or ""),
                     "reason": str(e.get("reason") or ""), "object": f"{involved.get('kind', '')}/{involved.get('name', '')}",
                     "message": str(e.get("message") or ""), "count": int(e.get("count") or 1), "_when": when})
    rows.sort(key=lambda r: r["_when"] or datetime.min.replace(tzinfo=now.tzinfo), reverse=True)
    return [{k: v for k, v in r.items() if k != "_when"} for r in rows[:limit]]


def why_view(obj: Mapping[str, Any], events: Iterable[Mapping[str, Any]], now: datetime,
             limit: int = 15) -> dict[str, Any]:
    """`why NAME`: the diagnosis, the conditions, what the operator is doing, the recent Events."""
    problems = diagnosis(obj)
    return {**_identity(obj), "serving": serving(obj), "diagnosis": problems or ["nothing is wrong"],
            "activity": activity(obj), "conditions": conditions(obj), "events": event_rows(events, now, limit)}


def survivors_view(obj: Mapping[str, Any], leases: Sequence[Mapping[str, Any]], now: datetime) -> dict[str, Any]:
    """`recover-quorum`: the survivors as the sidecars last reported them, ranked by the operator's own rule
    (raftset.quorum_loss.rank; `auto` picks raftset.quorum_loss.choose), beside the operator's QuorumLost."""
    ident = _identity(obj)
    name = ident["name"]
    raft = next((membership.parse_membership(((lease.get("metadata") or {}).get("annotations") or {})
                                             .get(contract.ANNOTATION_MEMBERSHIP))
                 for lease in leases if (lease.get("metadata") or {}).get("name") == contract.membership_lease_name(name)),
                None)
    heartbeats = [b for b in from_leases(lease for lease in leases if contract.LABEL_HEARTBEAT in
                                         ((lease.get("metadata") or {}).get("labels") or {}))
                  if contract.member_ordinal(name, b.pod) is not None]
    view = quorum_loss_decision.QuorumView(cluster=name, kind_short="", replicas=0, kept=(), raft=raft,
                                           heartbeats=heartbeats, request=None, policy="Manual", grace_seconds=0,
                                           lost_since=None, record=None, force_supported=True, now=now)
    found = quorum_loss_decision.survivors(view)
    ranked = sorted(found, key=quorum_loss.rank, reverse=True)
    chosen = quorum_loss.choose(found)
    renewed = {b.pod: b.renewed for b in heartbeats}
    return {**ident, "quorumLost": condition(obj, "QuorumLost"),
            "auto": chosen.pod if chosen else "",
            "survivors": [{"pod": s.pod, "member": s.member_id, "committed": s.committed, "term": s.term,
                           "applied": s.applied, "heartbeatAge": age(renewed.get(s.pod), now)} for s in ranked]}


def replace_steps(steps: Sequence[str], phase: str, reason: str, told: int) -> list[str]:
    """The steps of a replacement record not shown yet (`told` were), the one under way with the sidecar's words."""
    return [f"{step}: {reason}" if step == phase and reason and i == len(steps) - 1 else step
            for i, step in enumerate(steps) if i >= told]


RECOVERY_UNDER_WAY = ("Recovering", "Rejoining")


def recovery_outcome(lost: Mapping[str, str], recovering_seen: bool, pending: bool,
                     new_refusals: Sequence[str]) -> tuple[bool, str] | None:
    """(recovered, message) once the operator has answered a recover-quorum request, else None.

    `lost` is QuorumLost now; `recovering_seen` whether it was Recovering or Rejoining since the
    request; `pending` whether the request annotation is still on the cluster; `new_refusals` the
    messages of RecoveryRefused Events posted since the request. Refused: the operator removed the
    request and said why. Recovered: a recovery ran and QuorumLost is False past Rejoining.
    """
    if recovering_seen and lost.get("status") == "False" and lost.get("reason") not in RECOVERY_UNDER_WAY:
        return True, f"recovered: {lost.get('message', '')}"
    if not recovering_seen and not pending and new_refusals:
        return False, f"refused: {new_refusals[-1]}"
    return None


def backup_outcome(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """("succeeded" | "failed", the entry) once status.backup shows an attempt newer than `before`; else None."""
    success, failure = after.get("lastSuccess"), after.get("lastFailure")
    if success and success != before.get("lastSuccess"):
        return "succeeded", dict(success)
    if failure and (failure != before.get("lastFailure") or after.get("failures") != before.get("failures")):
        return "failed", dict(failure)
    return None


def backups_view(obj: Mapping[str, Any], destination: Mapping[str, Any], manifests: Sequence[backups.Manifest],
                 latest: backups.Manifest | None) -> dict[str, Any]:
    """`backups NAME`: the published backups (their manifests), newest first, and what `latest` names."""
    rows = sorted(manifests, key=lambda m: (m.taken, m.revision, m.key), reverse=True)
    return {**_identity(obj), "bucket": destination.get("bucket", ""), "endpoint": destination.get("endpoint", ""),
            "prefix": backups.cluster_prefix(str(destination.get("prefix") or ""), _identity(obj)["namespace"],
                                             _identity(obj)["name"]),
            "latest": latest.key if latest else "",
            "backups": [{"key": m.key, "taken": m.taken, "revision": m.revision, "size": m.size,
                         "sha256": m.sha256, "engine": m.engine, "latest": bool(latest and latest.key == m.key)}
                        for m in rows]}


def restored_cluster(source: Mapping[str, Any], key: str, new_name: str, replicas: int | None) -> dict[str, Any]:
    """The new cluster `restore` creates: the source's spec, bootstrapped from one of its backups.

    The backup's bucket is the source's spec.backup destination; `key` is a snapshot key or `latest`.
    """
    spec = copy.deepcopy(dict(source.get("spec") or {}))
    destination = spec.get("backup") or {}
    where = {k: destination[k] for k in ("s3", "pvc") if k in destination}
    spec.pop("bootstrap", None)
    spec["bootstrap"] = {"fromBackup": {"backup": key, "cluster": _identity(source)["name"], **where}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": source.get("apiVersion") or contract.API_VERSION, "kind": source.get("kind"),
            "metadata": {"name": new_name, "namespace": _identity(source)["namespace"]}, "spec": spec}
