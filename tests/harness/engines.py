"""Which real store a test runs: an engine, a version and the directory of its binaries.

The etcd tier runs in full on the default etcd version; every other supported etcd and Xline
run the membership lifecycle subset (tests marked `lifecycle`). The test id names the
engine build, e.g. `[etcd-3.7.3]` or `[xline-0.6.1+71479a4f]`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from raftset import engines
from raftset.contract import SidecarEnv
from raftset.engines import Engine
from tools.devcluster import build, kubelet, xline


@dataclass(frozen=True)
class EngineUnderTest:
    engine: Engine
    label: str  # the test id
    bin_dir: Path
    # Flags every lab member gets (RAFTSET_OPTIONS): the same ones a user would pass.
    options: Mapping[str, str] = field(default_factory=dict)
    # Builds (or finds cached) the binaries; raises when it cannot.
    ensure: Callable[[], object] = lambda: None
    # Instead of `options`, for a test that counts elections: timeouts a busy 2-core machine does
    # not trip (None: the same as `options`).
    counted_election_options: Mapping[str, str] | None = None

    @property
    def version(self) -> str:
        """The engine version a cluster's `spec.version` names to run this build."""
        return self.label.split("-", 1)[1].split("+", 1)[0]

    @property
    def options_json(self) -> str:
        return json.dumps(dict(self.options))

    def counting_elections(self) -> dict[str, str]:
        """A lab's `env_extra` for a test that counts elections: a hand-off is a MoveLeader, which
        does not wait for the timeout, so only elections nobody asked for are slowed down."""
        options = self.options if self.counted_election_options is None else self.counted_election_options
        return {SidecarEnv.OPTIONS: json.dumps(dict(options))}


def _etcd(component: build.Component) -> EngineUnderTest:
    return EngineUnderTest(
        engine=engines.ETCD,
        label=f"etcd-{component.version}",
        bin_dir=component.out_dir,
        # Fast elections keep the tier short.
        options={"heartbeat-interval": "50", "election-timeout": "500"},
        # A 500 ms election timeout tripped on a loaded runner and failed exact election counts.
        counted_election_options={"heartbeat-interval": "100", "election-timeout": "5000"},
        ensure=functools.partial(build.ensure, component, log=lambda _: None),
    )


XLINE = EngineUnderTest(
    engine=engines.XLINE,
    label=xline.XLINE.label,
    bin_dir=xline.XLINE.out_dir,
    options=kubelet.LOOPBACK_OPTIONS[engines.XLINE.name],  # metrics pushed: nothing bound on 0.0.0.0
    ensure=functools.partial(xline.ensure, xline.XLINE, log=lambda _: None),
)

ETCDS = tuple(_etcd(c) for c in build.ETCDS)
DEFAULT = next(e for e in ETCDS if e.label == f"etcd-{engines.ETCD.default_version}")
MATRIX = (*ETCDS, XLINE)
# The lifecycle subset's engines: every etcd, and Xline (its initial members bootstrap together;
# less the leader's hand-off, which it does not have).
LIFECYCLE = MATRIX
# A feature whose engine differences lie in the engine, not its version (backups): one build each.
PER_ENGINE = (DEFAULT, XLINE)


_READY: set[str] = set()


def ready(under_test: EngineUnderTest) -> None:
    """Build (or find cached) the engine's binaries once per session; raises when impossible."""
    if under_test.label not in _READY:
        under_test.ensure()
        _READY.add(under_test.label)
