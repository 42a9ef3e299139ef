"""The bench's client load (`tests.bench.load`), run inside a real-node lab's network namespace, where
the members' DNS names resolve: `python -m tests.bench.nodeload '<json>'` moves the leadership to
`leader_to`, starts the load on `endpoints` (with the client certificate in `tls_dir`, if given) (the leader watched through `watch`), prints
`{"warm": true}` once it is writing, runs until `stop_file` exists, and prints one JSON line: the
member list and everything the load observed. Its `time.monotonic()` is the bench's own clock: a
network namespace has no clock of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from raftset.sidecar.io.etcdclient import ClientTLS
from tests.bench.load import MAX_SECONDS, Load, Observed
from tests.bench.stats import Sample
from tests.real.nodewriter import members as member_list, move_leader


def observed_from(document: dict[str, Any]) -> Observed:
    """An `Observed` back from its JSON form (this program's last line)."""
    def samples(key: str) -> list[Sample]:
        return [Sample(**s) for s in document[key]]
    return Observed(writes=samples("writes"), reads=samples("reads"),
                    failed_write_requests=samples("failed_write_requests"),
                    failed_read_requests=samples("failed_read_requests"),
                    leaders=[(t, leader) for t, leader in document["leaders"]], errors=list(document["errors"]))


def main(args: dict[str, Any]) -> dict[str, Any]:
    tls = None
    if args.get("tls_dir"):
        tls_dir = Path(args["tls_dir"])
        tls = ClientTLS(ca=(tls_dir / "ca.crt").read_bytes(), cert=(tls_dir / "tls.crt").read_bytes(),
                        key=(tls_dir / "tls.key").read_bytes())
    asyncio.run(move_leader(args["endpoints"], tls, args["leader_to"]))
    members = asyncio.run(member_list(args["endpoints"][0], tls))
    load = Load(args["endpoints"], watch=args["watch"], tls=tls)
    load.start()
    load.wait_writes(20)
    print(json.dumps({"warm": True}), flush=True)
    stop_file, deadline = Path(args["stop_file"]), time.monotonic() + MAX_SECONDS
    while not stop_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return {"members": members, "observed": dataclasses.asdict(load.stop())}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
