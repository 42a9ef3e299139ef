"""The acknowledged-write checker, run inside a lab node's namespace (the members' addresses and
DNS names exist only there): `python -m tests.real.nodewriter '<json>'` optionally moves the
leadership to a named member, writes until `stop_file` exists (or for `seconds`), checks the
`check_endpoints`, and prints one JSON line: the leader before writing, the writer's counts, the
verdict, the member list and each checked member's version. With `acked_file` it also keeps the
acknowledged writes there; with `check_only` (such a file) it writes nothing and checks those of
them at or below `max_revision` on `endpoints` (a cluster restored from a backup taken then)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path

from raftset.sidecar.io.etcdclient import ClientTLS, MemberClient
from tests.harness import checker


async def members(endpoint: str, tls: ClientTLS | None) -> list[dict[str, object]]:
    async with MemberClient(endpoint, tls, timeout=10) as client:
        return [{"id": m.id, "name": m.name, "peer_urls": list(m.peer_urls), "learner": m.is_learner}
                for m in await client.member_list()]


async def _versions(endpoints: list[str], tls: ClientTLS) -> dict[str, str]:
    """Each member's version, as its Status reports it."""
    found = {}
    for endpoint in endpoints:
        async with MemberClient(endpoint, tls, timeout=10) as client:
            found[endpoint] = (await client.status()).version
    return found


async def _leader(endpoints: list[str], tls: ClientTLS | None) -> tuple[str, int]:
    """The leader's client URL and member id, as the first member that answers reports it."""
    for endpoint in endpoints:
        async with MemberClient(endpoint, tls, timeout=10) as client:
            leader = (await client.status()).leader
        for other in endpoints:
            async with MemberClient(other, tls, timeout=10) as client:
                if (await client.status()).member_id == leader:
                    return other, leader
    raise AssertionError(f"no leader among {endpoints}")


async def move_leader(endpoints: list[str], tls: ClientTLS | None, name: str) -> str:
    url, _ = await _leader(endpoints, tls)
    target = next(m for m in await members(endpoints[0], tls) if m["name"] == name)
    async with MemberClient(url, tls, timeout=10) as client:
        await client.move_leader(int(target["id"]), timeout=30)
    return (await _leader(endpoints, tls))[0]


def _check_only(args: dict, tls: ClientTLS) -> dict:
    saved = json.loads(Path(args["check_only"]).read_text())
    acked = {key: checker.Ack(**ack) for key, ack in saved.items() if ack["revision"] <= args["max_revision"]}
    out: dict[str, object] = {"ok": len(acked)}
    try:
        verdict = asyncio.run(checker.check(args["endpoints"], acked, tls))
        out["verdict"] = {"acknowledged": verdict.acknowledged, "revision": verdict.revision}
    except AssertionError as e:
        out["verdict_error"] = str(e)
    out["members"] = asyncio.run(members(args["endpoints"][0], tls))
    return out


def main(args: dict) -> dict:
    tls_dir = Path(args["tls_dir"])
    tls = ClientTLS(ca=(tls_dir / "ca.crt").read_bytes(), cert=(tls_dir / "tls.crt").read_bytes(),
                    key=(tls_dir / "tls.key").read_bytes())
    if args.get("check_only"):
        return _check_only(args, tls)
    out: dict[str, object] = {}
    if args.get("leader_to"):
        out["leader_before"] = asyncio.run(move_leader(args["endpoints"], tls, args["leader_to"]))
    else:
        out["leader_before"] = asyncio.run(_leader(args["endpoints"], tls))[0]
    writer = checker.Writer(args["endpoints"], tls)
    writer.start()
    deadline = time.monotonic() + args["seconds"]
    stop_file = Path(args["stop_file"]) if args.get("stop_file") else None
    if stop_file:
        print(json.dumps({"writing": True}), flush=True)
    while time.monotonic() < deadline and not (stop_file and stop_file.exists()):
        time.sleep(0.2)
    writer.stop()
    if args.get("acked_file"):
        Path(args["acked_file"]).write_text(json.dumps({k: dataclasses.asdict(a) for k, a in writer.acked.items()}))
    out.update(ok=writer.ok, failed=writer.failed, errors=writer.errors[:5], longest_stall=writer.longest_stall)
    check_endpoints = args.get("check_endpoints") or args["endpoints"]
    try:
        verdict = asyncio.run(checker.check(check_endpoints, writer.acked, tls))
        out["verdict"] = {"acknowledged": verdict.acknowledged, "revision": verdict.revision}
    except AssertionError as e:
        out["verdict_error"] = str(e)
    out["members"] = asyncio.run(members(check_endpoints[0], tls))
    out["leader_after"] = asyncio.run(_leader(check_endpoints, tls))[0]
    out["versions"] = asyncio.run(_versions(check_endpoints, tls))
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
