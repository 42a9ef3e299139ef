"""The scale-in headline on every engine build: 3->2 of the leader, at 0 ms, (b) and (c).

The same runs as `scalein` (its load, its Toxiproxy in front of every peer port, the engine's
own raft timings) on each build of `tests.harness.engines.MATRIX`: etcd 3.5, 3.6, 3.7 and Xline.
Xline has no safe leader hand-off (`Capabilities.hand_off` False): its leaving leader removes
itself without moving leadership and the survivors elect one; its rows say what that costs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from tests.bench import scalein
from tests.harness.engines import EngineUnderTest, ready

STRATEGIES = (scalein.STRATEGIES[1], scalein.STRATEGIES[2])
SIZE = (3, 2)
COLUMNS = ("engine", *scalein.COLUMNS)


async def bench(kubeconfig: str, workdir: Path, build: EngineUnderTest, repetitions: int, baseline_s: float,
                strategies: Sequence[str] = STRATEGIES, log: Callable[[str], None] = print) -> list[scalein.Run]:
    """One build's share: the headline's runs at 0 ms one-way."""
    ready(build)
    return await scalein.bench(kubeconfig, workdir, (SIZE,), repetitions, baseline_s, strategies, log, (0,), build)
