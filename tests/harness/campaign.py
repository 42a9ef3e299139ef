"""The robustness campaign's table (issue 27, items 4 and 5): which operator action runs under
which fault on which engine and backend, the seeded short subset `make test` runs, and the
results table `make robustness` writes into docs/robustness.md. Pure: tests/e2e/test_campaign.py
drives the cases, this module only decides and summarizes.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ETCD, XLINE = "etcd", "xline"
STS, ASTS = "StatefulSet", "AdvancedStatefulSet"

SCALE_IN, SCALE_OUT = "scale-in 5→3", "scale-out 3→5"
ROLL, UPGRADE = "roll (option change)", "upgrade"
REPLACE_FOLLOWER, REPLACE_LEADER = "replace a follower", "replace the leader"
QUORUM_LOSS, BACKUP_RESTORE, LIGHTS_OUT = "quorum-loss recovery", "backup, then restore", "lights-out"
ACTIONS = (SCALE_IN, SCALE_OUT, ROLL, UPGRADE, REPLACE_FOLLOWER, REPLACE_LEADER, QUORUM_LOSS,
           BACKUP_RESTORE, LIGHTS_OUT)

NO_FAULT = "none"
OPERATOR_KILLED = "SIGKILL of the operator"
LEADER_KILLED, FOLLOWER_KILLED = "SIGKILL of the leader", "SIGKILL of a follower"
SIDECAR_KILLED = "SIGKILL of the leader's sidecar"
LEADER_PAUSED, FOLLOWER_PAUSED = "leader paused (SIGSTOP)", "follower paused (SIGSTOP)"
LEASES_REFUSED = "a follower's Lease writes refused"
# A partition through the real Toxiproxy in front of each member's peer port: the follower and the
# leader exchange nothing, the third member still hears both (faults.cut_off). A member cut off from
# every peer needs a proxy per link, which one advertised peer URL per member does not allow.
CUT_OFF = "a follower cut off from the leader (Toxiproxy)"
# Ahead, past the sidecars' clean grace period (120 s in the campaign): to that sidecar every other
# member's heartbeat looks older than the grace. Nothing may be removed on that alone.
CLOCK_SKEWED = "the leader's sidecar clock 150 s ahead (libfaketime)"
VOLUME_FULL = "a follower's data volume full (tmpfs, NOSPACE)"
FAULTS = (NO_FAULT, OPERATOR_KILLED, LEADER_KILLED, FOLLOWER_KILLED, SIDECAR_KILLED, LEADER_PAUSED,
          FOLLOWER_PAUSED, LEASES_REFUSED, CUT_OFF, CLOCK_SKEWED, VOLUME_FULL)

# The short subset's actions: the upgrade (two etcd builds), the quorum loss (minutes of recovery)
# and backup-then-restore (an S3 server, a second cluster) run in `make robustness` only, so that
# `make test`'s subset stays the four cases it was measured with.
SHORT_ACTIONS = (SCALE_IN, SCALE_OUT, ROLL, REPLACE_FOLLOWER, REPLACE_LEADER, LIGHTS_OUT)
SHORT_FAULTS = (OPERATOR_KILLED, LEADER_KILLED, FOLLOWER_KILLED, SIDECAR_KILLED, LEADER_PAUSED, FOLLOWER_PAUSED,
                LEASES_REFUSED)
# Actions that replace a member: its ID must be new, every other kept. Scale-out adds new ones.
REPLACES = {REPLACE_FOLLOWER: "follower", REPLACE_LEADER: "leader"}


@dataclass(frozen=True)
class Case:
    action: str
    fault: str
    engine: str
    backend: str

    @property
    def id(self) -> str:
        return f"{SLUGS[self.action]}-{SLUGS[self.fault]}-{self.engine}-{self.backend}"


SLUGS = {SCALE_IN: "scale-in", SCALE_OUT: "scale-out", ROLL: "roll", UPGRADE: "upgrade",
         REPLACE_FOLLOWER: "replace-follower", REPLACE_LEADER: "replace-leader", QUORUM_LOSS: "quorum-loss",
         BACKUP_RESTORE: "backup-restore", LIGHTS_OUT: "lights-out",
         NO_FAULT: "no-fault", OPERATOR_KILLED: "operator-killed", LEADER_KILLED: "leader-killed",
         FOLLOWER_KILLED: "follower-killed", SIDECAR_KILLED: "sidecar-killed", LEADER_PAUSED: "leader-paused",
         FOLLOWER_PAUSED: "follower-paused", LEASES_REFUSED: "leases-refused", CUT_OFF: "follower-cut-off",
         CLOCK_SKEWED: "clock-skewed", VOLUME_FULL: "volume-full"}


def backends(action: str) -> tuple[str, ...]:
    """Scale-in differs by backend (which ordinal goes); every other action runs on the operator's default."""
    return (STS, ASTS) if action == SCALE_IN else (ASTS,)


def engines_of(action: str) -> tuple[str, ...]:
    """Xline has one version, so no upgrade, and cannot start one member alone, so no quorum-loss
    recovery (the operator says RecoveryUnsupported: docs/operations.md); the rest applies to both."""
    return (ETCD,) if action in (UPGRADE, QUORUM_LOSS) else (ETCD, XLINE)


def applies(action: str, fault: str) -> bool:
    """A fault that can land in the middle of the action. A lights-out stops every member, so a
    member's kill or pause adds nothing to it; a quorum loss has already lost the leader, and its
    faults land on the survivor (its sidecar killed, its Lease writes refused, its sidecar's clock
    skewed) or the operator; a survivor whose volume is full could not recover at all."""
    if action == LIGHTS_OUT:
        return fault in (NO_FAULT, OPERATOR_KILLED, SIDECAR_KILLED, CLOCK_SKEWED)
    if action == QUORUM_LOSS:
        return fault in (NO_FAULT, OPERATOR_KILLED, SIDECAR_KILLED, LEASES_REFUSED, CLOCK_SKEWED)
    return True


def cases() -> list[Case]:
    return [Case(a, f, e, b) for a in ACTIONS for f in FAULTS if applies(a, f)
            for e in engines_of(a) for b in backends(a)]


SEED = 27
SHORT_SIZE = 4


def short_subset(all_cases: Sequence[Case], size: int = SHORT_SIZE, seed: int = SEED) -> list[Case]:
    """`make test`'s fixed subset: seeded, among the cases of SHORT_ACTIONS and SHORT_FAULTS, on etcd (Xline's build is not
    warm in every run), at most one case per action and per fault so that the subset spreads."""
    rng = random.Random(seed)
    pool = [c for c in all_cases if c.engine == ETCD and c.fault in SHORT_FAULTS and c.action in SHORT_ACTIONS]
    rng.shuffle(pool)
    chosen: list[Case] = []
    for case in pool:
        if len(chosen) < size and all(c.action != case.action and c.fault != case.fault for c in chosen):
            chosen.append(case)
    return chosen


@dataclass(frozen=True)
class Result:
    case: Case
    operations: int
    violations: int  # linearizability, watch and acknowledged-write problems, identity failures
    lost: int  # acknowledged writes lost (excused only for a quorum loss's lost members)
    unavailable_s: float  # the longest time no client operation succeeded


def longest_unavailability(spans: Iterable[tuple[int, int | None]]) -> float:
    """The longest gap, in seconds, between one answered operation's return and the next one's
    (call, return in monotonic nanoseconds; None: unknown outcome, no answer)."""
    returns = sorted(r for _, r in spans if r is not None)
    gaps = [b - a for a, b in zip(returns, returns[1:])]
    return max(gaps, default=0) / 1e9


def save(result: Result, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{result.case.id}.{len(list(directory.glob(result.case.id + '.*')))}.json"
    path.write_text(json.dumps(asdict(result)))
    return path


def load(directory: Path) -> list[Result]:
    results = []
    for path in sorted(directory.glob("*.json")):
        raw = json.loads(path.read_text())
        results.append(Result(Case(**raw.pop("case")), **raw))
    return results


def table(all_cases: Sequence[Case], results: Sequence[Result]) -> str:
    """Markdown: one row per action × fault × engine (backends summed), what ran and what it found."""
    rows = ["| action | fault | engine | runs | operations checked | violations | acknowledged writes lost "
            "| longest unavailability |", "|---|---|---|---|---|---|---|---|"]
    keys = list(dict.fromkeys((c.action, c.fault, c.engine) for c in all_cases))
    for action, fault, engine in keys:
        mine = [r for r in results if (r.case.action, r.case.fault, r.case.engine) == (action, fault, engine)]
        if not mine:
            rows.append(f"| {action} | {fault} | {engine} | 0 (not run yet) | | | | |")
            continue
        rows.append(f"| {action} | {fault} | {engine} | {len(mine)} | {sum(r.operations for r in mine)} "
                    f"| {sum(r.violations for r in mine)} | {sum(r.lost for r in mine)} "
                    f"| {max(r.unavailable_s for r in mine):.1f} s |")
    return "\n".join(rows)


BEGIN, END = "<!-- campaign table: make robustness -->", "<!-- end of the campaign table -->"


def write_table(doc: Path, rendered: str) -> None:
    """Replace the table between the markers in `doc` (the markers must be there)."""
    text = doc.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{rendered}\n{END}{tail}")


def main() -> None:
    """`make robustness`'s last step: the table from the saved results."""
    results_dir, doc = Path(sys.argv[1]), Path(sys.argv[2])
    write_table(doc, table(cases(), load(results_dir)))


if __name__ == "__main__":
    main()
