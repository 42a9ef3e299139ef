"""`python -m tools.devcluster up|run` started as a user starts it, watched from outside, stopped by a signal.

What a stop must leave behind is nothing: `Cli.processes()` records every descendant of
the command (by pid, with its start time, so a reused pid is not mistaken for it) and
`Cli.survivors()` says which of them still run after it exited.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

from tests.harness.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
# `kubectl raftset`: the plugin's console script, where pip installed it.
PLUGIN = str(Path(sys.executable).parent / "kubectl-raftset")


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, start time) from /proc/<pid>/stat, None if the pid is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[0], int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """Every live descendant of `root` (and `root` itself): pid -> start time."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                children.setdefault(stat[0], []).append(int(entry))
                starts[int(entry)] = stat[2]
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in starts:
            found[pid] = starts[pid]
        todo += children.get(pid, [])
    return found


class Cli:
    """One run of the devcluster CLI, in its own session, its output collected line by line."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.lines: list[str] = []
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "tools.devcluster", *args], cwd=ROOT, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **(env or {})})
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_match(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first output line matching `pattern`, waiting for it (failing early if the command exits)."""
        def found() -> re.Match[str] | None:
            # The exit is read before the lines: a command that prints the line and exits between
            # two polls has printed it (its reader is done, so the lines are complete).
            exited = self.popen.poll() is not None and not self._reader.is_alive()
            match = next((m for m in map(re.compile(pattern).search, list(self.lines)) if m), None)
            if match is None and exited:
                raise AssertionError(f"exited ({self.popen.returncode}) before printing {pattern!r}:\n{self.output}")
            return match
        try:
            return wait_for(found, timeout, f"{pattern!r} in the output of {' '.join(self.args)}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- output:\n{self.output[-6000:]}") from None

    def processes(self) -> dict[int, int]:
        return descendants(self.popen.pid)

    def processes_named(self, name: str) -> list[int]:
        """The recorded descendants whose command's first word ends with `name`."""
        found = []
        for pid in self.processes():
            try:
                argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
            except OSError:
                continue
            if Path(argv0).name == name:
                found.append(pid)
        return found

    def signal(self, sig: signal.Signals) -> None:
        """`sig` to the command itself, as make forwards it."""
        self.popen.send_signal(sig)

    def stop(self, sig: signal.Signals, timeout: float) -> int:
        """Send `sig` to the command and wait for its exit."""
        self.signal(sig)
        return self.wait_exit(timeout, f"after {sig.name}")

    def wait_exit(self, timeout: float, when: str) -> int:
        """The command's exit code, within `timeout` (killed and failed otherwise)."""
        try:
            code = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"still running {timeout:.0f}s {when}:\n{self.output[-6000:]}") from None
        self._reader.join(timeout=10)
        return code

    def close(self) -> None:
        """The test's own cleanup if anything failed: SIGTERM (its teardown removes its files),
        then SIGKILL to the command's session."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=30)


def survivors(recorded: dict[int, int]) -> list[str]:
    """Which recorded processes still run (zombies awaiting their reaper have ended)."""
    alive = []
    for pid, start in recorded.items():
        stat = _stat(pid)
        if stat is not None and stat[2] == start and stat[1] != "Z":
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120]
            except OSError:
                continue  # ended just now
            alive.append(f"{pid} {command!r}")
    return alive


def existing(paths: Iterable[Path]) -> list[Path]:
    return [p for p in paths if p.exists()]
