"""Start and stop the plane's processes: each in its own process group, killed by its own id.

Teardown runs on an explicit stop and at interpreter exit (atexit; the CLI turns SIGTERM
into an orderly exit). Each child also asks the kernel for SIGKILL when the thread that
started it dies (PR_SET_PDEATHSIG), which covers a parent killed outright; so start a plane
from a thread that lives as long as the plane should (the main thread, normally). The
death signal is set by util-linux's `setpriv` in front of the command, not by Python code
in the forked child: a child of a process that runs gRPC threads crashed there.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

STOP_GRACE_S = 10.0


# Kept across exec: the command itself dies with the thread that started it.
DIE_WITH_PARENT = ("setpriv", "--pdeathsig", "KILL", "--")


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Supervisor:
    """Owns the processes it started; `stop_all` ends exactly those, newest first."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[Proc] = []
        atexit.register(self.stop_all)

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Proc:
        log = self.log_dir / f"{name}.log"
        with open(log, "ab") as out:
            popen = subprocess.Popen(
                [*DIE_WITH_PARENT, *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,  # own process group: killpg reaches its children only
            )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc, grace_s: float = STOP_GRACE_S) -> None:
        if proc.alive():
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        # The leader may be gone while a child it forked lingers: sweep its group once more.
        _signal_group(proc.pid, signal.SIGKILL)
        if proc.popen.returncode is None:
            proc.popen.wait(timeout=grace_s)
        if proc in self.procs:
            self.procs.remove(proc)

    def kill(self, proc: Proc, wait_s: float = STOP_GRACE_S) -> None:
        """SIGKILL at once, as a power loss would: no chance to shut down cleanly."""
        _signal_group(proc.pid, signal.SIGKILL)
        if proc.popen.returncode is None:
            proc.popen.wait(timeout=wait_s)
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(list(self.procs)):
            self.stop(proc)
        atexit.unregister(self.stop_all)

    def dead(self) -> list[Proc]:
        return [p for p in self.procs if not p.alive()]


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_for(check, what: str, timeout_s: float, procs: Sequence[Proc] = (), interval_s: float = 0.25):
    """Poll `check()` until it returns a truthy value; fail early if a watched process died."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        for proc in procs:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}) while waiting for {what}:\n{proc.tail()}")
        try:
            result = check()
            if result:
                return result
        except Exception as exc:  # noqa: BLE001 - any failure means "not yet"
            last_error = exc
        time.sleep(interval_s)
    detail = "\n".join(f"--- {p.name} log tail:\n{p.tail()}" for p in procs)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what} (last error: {last_error})\n{detail}")
