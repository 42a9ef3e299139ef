"""The acknowledged-write checker, run inside a lab node's namespace (the members' addresses and
DNS names exist only there): `python -m tests.real.nodewriter '<json>'` writes for the given
seconds, checks, and prints one JSON line: the writer's counts, the verdict and the member list."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from raftset.etcdclient import ClientTLS, MemberClient
from tests.harness import checker


async def _members(endpoint: str, tls: ClientTLS) -> list[dict[str, object]]:
    async with MemberClient(endpoint, tls, timeout=10) as client:
        return [{"id": m.id, "name": m.name, "peer_urls": list(m.peer_urls), "learner": m.is_learner}
                for m in await client.member_list()]


def main(args: dict) -> dict:
    tls_dir = Path(args["tls_dir"])
    tls = ClientTLS(ca=(tls_dir / "ca.crt").read_bytes(), cert=(tls_dir / "tls.crt").read_bytes(),
                    key=(tls_dir / "tls.key").read_bytes())
    writer = checker.Writer(args["endpoints"], tls)
    writer.start()
    time.sleep(args["seconds"])
    writer.stop()
    out: dict[str, object] = {"ok": writer.ok, "failed": writer.failed, "errors": writer.errors[:5]}
    try:
        verdict = asyncio.run(checker.check(args["endpoints"], writer.acked, tls))
        out["verdict"] = {"acknowledged": verdict.acknowledged, "revision": verdict.revision}
    except AssertionError as e:
        out["verdict_error"] = str(e)
    out["members"] = asyncio.run(_members(args["endpoints"][0], tls))
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
