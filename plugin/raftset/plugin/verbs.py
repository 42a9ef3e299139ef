"""The verbs: read, write the annotation a person would write, then follow what the operator publishes.

Each returns its exit code (raftset.plugin.cli.Exit); what it shows goes through `Out`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

from raftset import backups, contract
from raftset.replace import Progress, parse_progress
from raftset.sidecar.io.objectstore import S3Settings, S3Store, StoreError
from raftset.plugin.pure import text
from raftset.plugin.pure import views
from raftset.plugin.io.kube import Api, NotFound

OK, FAILED, USAGE, NOT_READY, TIMED_OUT = 0, 1, 2, 3, 4
POLL_SECONDS = 2.0
T = TypeVar("T")


@dataclass
class Out:
    """Text for people on stdout; with -o json the result document there and the progress on stderr."""

    json: bool

    def progress(self, line: str) -> None:
        print(line, file=sys.stderr if self.json else sys.stdout, flush=True)

    def result(self, document: Any, rendered: str) -> None:
        if self.json:
            print(json.dumps(document, indent=2, sort_keys=True), flush=True)
        elif rendered:
            print(rendered, end="" if rendered.endswith("\n") else "\n", flush=True)


def now() -> datetime:
    return datetime.now(timezone.utc)


def follow(step: Callable[[], T | None], timeout: float) -> T | None:
    """`step()` every POLL_SECONDS until it returns something, or None after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = step()
        if found is not None or time.monotonic() >= deadline:
            return found
        time.sleep(POLL_SECONDS)


def status(api: Api, args: argparse.Namespace, out: Out) -> int:
    _, obj = api.cluster(args.name, args.kind)
    view = views.status_view(obj, api.nodes(args.name), now(), api.leases(contract.label_selector(args.name)))
    out.result(view, text.status(view))
    return OK if view["serving"] else NOT_READY


def why(api: Api, args: argparse.Namespace, out: Out) -> int:
    _, obj = api.cluster(args.name, args.kind)
    view = views.why_view(obj, api.events(args.name), now(), limit=args.events)
    out.result(view, text.why(view))
    return OK if view["serving"] else NOT_READY


def replace(api: Api, args: argparse.Namespace, out: Out) -> int:
    pod = api.pod(args.pod)
    cluster = ((pod.get("metadata") or {}).get("labels") or {}).get(contract.LABEL_CLUSTER)
    if not cluster:
        raise NotFound(f"pod {api.namespace}/{args.pod} is no raftset member (no {contract.LABEL_CLUSTER} label)")

    def record() -> Progress | None:
        annotations = (api.pod(args.pod).get("metadata") or {}).get("annotations") or {}
        return parse_progress(annotations.get(contract.ANNOTATION_REPLACE_PROGRESS))

    before = record()
    api.annotate_pod(args.pod, {contract.ANNOTATION_REPLACE: "true"})
    out.progress(f"{args.pod}: {contract.ANNOTATION_REPLACE}=true set; its sidecar replaces the member step by step")
    if args.no_wait:
        out.result({"pod": args.pod, "cluster": cluster, "requested": True}, "")
        return OK
    told = 0

    def finished() -> Progress | None:
        nonlocal told
        current = record()
        if current is None or (before is not None and current.id == before.id):
            return None
        for line in views.replace_steps(current.steps, current.phase, current.reason, told):
            out.progress(f"  {line}")
        told = len(current.steps)
        return current if current.finished else None

    done = follow(finished, args.timeout)
    if done is None:
        out.result({"pod": args.pod, "cluster": cluster, "phase": "TimedOut"},
                   f"not finished after {args.timeout:.0f} s: `kubectl raftset why {cluster}`")
        return TIMED_OUT
    document = {"pod": args.pod, "cluster": cluster, "phase": done.phase, "oldMember": done.old_member,
                "newMember": done.new_member, "cause": done.cause, "steps": list(done.steps)}
    if done.phase != contract.ReplacePhase.DONE:
        out.result(document, f"{args.pod}: {done.phase}: {done.reason}")
        return FAILED
    out.result(document, f"{args.pod}: replaced, member {done.old_member} -> {done.new_member}")
    return OK


def recover_quorum(api: Api, args: argparse.Namespace, out: Out) -> int:
    engine, obj = api.cluster(args.name, args.kind)
    view = views.survivors_view(obj, api.leases(), now())
    out.progress(text.survivors(view).rstrip("\n"))
    request = args.from_pod or contract.RECOVER_QUORUM_AUTO
    if not args.yes and not confirmed(f"Annotate {engine.short_name}/{args.name} "
                                      f"{contract.ANNOTATION_RECOVER_QUORUM}={request}? [y/N] "):
        out.result({**view, "requested": ""}, "nothing done")
        return FAILED
    refusals = {_event_key(e) for e in api.events(args.name) if e.get("reason") == "RecoveryRefused"}
    api.annotate_cluster(engine, args.name, {contract.ANNOTATION_RECOVER_QUORUM: request})
    out.progress(f"{contract.ANNOTATION_RECOVER_QUORUM}={request} set; the operator decides")
    if args.no_wait:
        out.result({**view, "requested": request}, "")
        return OK
    shown, recovering = "", False

    def outcome() -> tuple[bool, str] | None:
        nonlocal shown, recovering
        _, current = api.cluster(args.name, engine.kind)
        lost = views.condition(current, "QuorumLost")
        if lost.get("reason") != shown:
            shown = lost.get("reason", "")
            out.progress(f"  QuorumLost={lost.get('status')} ({lost.get('reason')}): {lost.get('message')}")
        recovering = recovering or lost.get("reason") in views.RECOVERY_UNDER_WAY
        pending = contract.ANNOTATION_RECOVER_QUORUM in ((current.get("metadata") or {}).get("annotations") or {})
        fresh = [str(e.get("message") or "") for e in ([] if pending or recovering else api.events(args.name))
                 if e.get("reason") == "RecoveryRefused" and _event_key(e) not in refusals]
        return views.recovery_outcome(lost, recovering, pending, fresh)

    result = follow(outcome, args.timeout)
    if result is None:
        out.result({**view, "requested": request, "outcome": "TimedOut"},
                   f"not recovered after {args.timeout:.0f} s: `kubectl raftset why {args.name}`")
        return TIMED_OUT
    recovered, message = result
    out.result({**view, "requested": request, "outcome": "Recovered" if recovered else "Refused",
                "message": message}, message)
    return OK if recovered else FAILED


def _event_key(event: dict[str, Any]) -> tuple[str, int]:
    return str((event.get("metadata") or {}).get("name")), int(event.get("count") or 1)


def confirmed(question: str) -> bool:
    print(question, end="", file=sys.stderr, flush=True)
    try:
        return input().strip().lower() in ("y", "yes")
    except EOFError:
        return False


def backup(api: Api, args: argparse.Namespace, out: Out) -> int:
    engine, obj = api.cluster(args.name, args.kind)
    if not (obj.get("spec") or {}).get("backup"):
        out.result({"name": args.name, "outcome": "NotConfigured"}, f"{args.name} has no spec.backup")
        return NOT_READY
    before = (obj.get("status") or {}).get("backup") or {}
    api.annotate_cluster(engine, args.name, {contract.ANNOTATION_BACKUP_NOW: "true"})
    out.progress(f"{contract.ANNOTATION_BACKUP_NOW}=true set; the leader's sidecar takes the backup")
    if args.no_wait:
        out.result({"name": args.name, "requested": True}, "")
        return OK

    def attempt() -> tuple[str, dict[str, Any]] | None:
        _, current = api.cluster(args.name, engine.kind)
        return views.backup_outcome(before, (current.get("status") or {}).get("backup") or {})

    result = follow(attempt, args.timeout)
    if result is None:
        out.result({"name": args.name, "outcome": "TimedOut"},
                   f"no backup finished after {args.timeout:.0f} s: `kubectl raftset why {args.name}`")
        return TIMED_OUT
    verdict, entry = result
    if verdict == "failed":
        out.result({"name": args.name, "outcome": "Failed", **entry},
                   f"backup failed ({entry.get('reason')}): {entry.get('message')}")
        return FAILED
    out.result({"name": args.name, "outcome": "Succeeded", **entry},
               f"backup {entry['key']} at revision {entry['revision']} ({entry['size']} bytes)")
    return OK


def backup_list(api: Api, args: argparse.Namespace, out: Out) -> int:
    _, obj = api.cluster(args.name, args.kind)
    s3 = ((obj.get("spec") or {}).get("backup") or {}).get("s3")
    if not s3:
        out.result({"name": args.name, "backups": []},
                   f"{args.name} backs up to no S3 bucket (no spec.backup.s3): nothing this command can list")
        return NOT_READY
    credentials = api.secret(s3["credentialsSecret"])
    ca = s3.get("caSecret") or {}
    with tempfile.NamedTemporaryFile("w", suffix=".crt") as bundle:
        if ca.get("name"):
            bundle.write(api.secret(ca["name"])[ca.get("key") or "ca.crt"])
            bundle.flush()
        store = S3Store(S3Settings(endpoint=str(s3["endpoint"]).rstrip("/"), bucket=s3["bucket"],
                                   access_key=credentials.get(contract.ACCESS_KEY_FILE, ""),
                                   secret_key=credentials.get(contract.SECRET_KEY_FILE, ""),
                                   region=s3.get("region") or "us-east-1",
                                   ca_bundle=bundle.name if ca.get("name") else None))
        meta = obj.get("metadata") or {}
        prefix = str(s3.get("prefix") or "")
        try:
            keys = store.keys(backups.cluster_prefix(prefix, meta["namespace"], args.name))
            manifests = [backups.Manifest.from_json(raw) for stored in backups.published(keys)
                         if (raw := store.get(backups.manifest_key(stored.key))) is not None]
            latest_raw = store.get(backups.latest_key(prefix, meta["namespace"], args.name))
        except StoreError as exc:
            out.result({"name": args.name, "error": exc.reason, "message": str(exc)},
                       f"cannot list the bucket ({exc.reason}): {exc}")
            return FAILED
    latest = backups.Manifest.from_json(latest_raw) if latest_raw else None
    view = views.backups_view(obj, s3, manifests, latest)
    out.result(view, text.backup_list(view))
    return OK


def restore(api: Api, args: argparse.Namespace, out: Out) -> int:
    engine, source = api.cluster(args.name, args.kind)
    if not ((source.get("spec") or {}).get("backup") or {}):
        out.result({"name": args.name, "outcome": "NotConfigured"},
                   f"{args.name} has no spec.backup: the bucket to restore from is unknown")
        return NOT_READY
    body = views.restored_cluster(source, args.from_key, args.new_name, args.replicas)
    api.create_cluster(engine, body)
    out.progress(f"{engine.kind} {api.namespace}/{args.new_name} created from {args.name}'s backup {args.from_key}")
    if args.no_wait:
        out.result(body, "")
        return OK

    def settled() -> tuple[int, str] | None:
        _, current = api.cluster(args.new_name, engine.kind)
        degraded = views.condition(current, "Degraded")
        if degraded.get("reason") in (backups.CHECKSUM_MISMATCH, backups.BACKUP_MISSING, backups.RESTORE_FAILED):
            return FAILED, f"restore failed ({degraded['reason']}): {degraded['message']}"
        if views.condition(current, "Available").get("status") == "True":
            return OK, f"{args.new_name} is Available"
        return None

    result = follow(settled, args.timeout)
    if result is None:
        out.result({**body, "outcome": "TimedOut"},
                   f"{args.new_name} not Available after {args.timeout:.0f} s: `kubectl raftset why {args.new_name}`")
        return TIMED_OUT
    code, message = result
    out.result({**body, "outcome": "Available" if code == OK else "Failed", "message": message}, message)
    return code
