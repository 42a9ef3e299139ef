"""The views of raftset.plugin.views as text for a terminal (pure: strings in, strings out)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """kubectl-style columns: left-aligned, three spaces apart, no trailing blanks."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _header(view: Mapping[str, Any]) -> str:
    return f"{view['kind']} {view['namespace']}/{view['name']}"


def _conditions(view: Mapping[str, Any]) -> str:
    return table(("TYPE", "STATUS", "REASON", "MESSAGE"),
                 [(c["type"], c["status"], c["reason"], c["message"]) for c in view["conditions"]])


def status(view: Mapping[str, Any]) -> str:
    ready, desired = (_cell(view[k]) for k in ("readyReplicas", "desired"))
    lines = [f"{_header(view)}   version {view['version'] or '-'}   {view['workloadKind'] or '-'}",
             f"members {ready} ready of {desired} desired, leader {view['leader'] or 'none'}", ""]
    rows = [(m["name"], m["ordinal"], m["id"], m["role"], m["learner"], m["indexLag"], m["healthy"], m["ready"],
             m["node"] or "-", f"{m['heartbeatAge']} ago" if m["heartbeatAge"] else "-") for m in view["members"]]
    lines.append(table(("MEMBER", "ORDINAL", "ID", "ROLE", "LEARNER", "LAG", "HEALTHY", "READY", "NODE",
                        "HEARTBEAT"), rows) if rows else "no member published yet")
    lines += ["", _conditions(view), "", "Now:"]
    lines += [f"  {line}" for line in view["activity"]]
    return "\n".join(lines) + "\n"


def why(view: Mapping[str, Any]) -> str:
    lines = [f"{_header(view)}: {'serving' if view['serving'] else 'NOT serving as it should'}", "", "Diagnosis:"]
    lines += [f"  - {d}" for d in view["diagnosis"]]
    lines += ["", "The operator is doing:"] + [f"  - {a}" for a in view["activity"]]
    lines += ["", _conditions(view), "", "Recent events (newest first):"]
    if view["events"]:
        lines += [f"  {e['age']:>4} ago  {e['type']:<7}  {e['reason']} ({e['object']}"
                  f"{', x' + str(e['count']) if e['count'] > 1 else ''}): {e['message']}" for e in view["events"]]
    else:
        lines.append("  none")
    return "\n".join(lines) + "\n"


def survivors(view: Mapping[str, Any]) -> str:
    lost = view["quorumLost"]
    lines = [f"{_header(view)}: QuorumLost={lost.get('status', 'unknown')} ({lost.get('reason', 'not reported')})"]
    if lost.get("message"):
        lines.append(f"  {lost['message']}")
    lines += ["", "Survivors, most up to date first (as their sidecars last reported; the operator decides):"]
    rows = [(i + 1, s["pod"], s["member"], s["committed"], s["term"], s["applied"],
             f"{s['heartbeatAge']} ago" if s["heartbeatAge"] else "-") for i, s in enumerate(view["survivors"])]
    lines.append(table(("RANK", "POD", "MEMBER", "COMMITTED", "TERM", "APPLIED", "HEARTBEAT"), rows)
                 if rows else "  none answers Status")
    if view["auto"]:
        lines.append(f"\n`auto` would choose {view['auto']}.")
    return "\n".join(lines) + "\n"


def backup_list(view: Mapping[str, Any]) -> str:
    lines = [f"{_header(view)}: backups in s3 bucket {view['bucket']} under {view['prefix']} ({view['endpoint']})"]
    rows = [("*" if b["latest"] else "", b["key"], b["taken"], b["revision"], b["size"]) for b in view["backups"]]
    lines.append(table(("LATEST", "KEY", "TAKEN", "REVISION", "SIZE"), rows) if rows else "no backup published")
    return "\n".join(lines) + "\n"
