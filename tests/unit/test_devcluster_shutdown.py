"""The devcluster CLI's stop signals: a late one after the teardown must not change the exit code.

CI saw `up` exit -15 after a clean teardown: the second SIGTERM arrived while the interpreter
was finalizing, when Python had put back the default action. These run a real interpreter
(the behaviour lives in CPython's finalization) and signal it from outside.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tools.devcluster import shutdown

pytestmark = pytest.mark.unit

# The child sets up `shutdown` as `up` does, starts a pelter that SIGTERMs it every
# millisecond until it is gone (at most 5 s; its stderr is not ours, so `run` need not wait for
# it), and exits 0 as soon as the pelting begins.
CHILD = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from tools.devcluster import shutdown
    shutdown.on_stop_signals()
    shutdown.shield()
    {finish}
    pelter = subprocess.Popen([sys.executable, "-c", '''
    import os, signal, sys, time
    parent, deadline = int(sys.argv[1]), time.monotonic() + 5
    print("pelting", flush=True)
    while time.monotonic() < deadline:
        try:
            os.kill(parent, signal.SIGTERM)
        except ProcessLookupError:
            break
        time.sleep(0.001)
    ''', str(os.getpid())], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    pelter.stdout.readline()
    time.sleep(0.05)
    sys.exit(0)
""")


def run_child(finish: str) -> int:
    return subprocess.run([sys.executable, "-c", CHILD.format(finish=finish)], capture_output=True,
                          timeout=30).returncode


def test_after_the_teardown_late_stop_signals_leave_the_exit_code_alone() -> None:
    assert [run_child("shutdown.stopped()") for _ in range(5)] == [0] * 5


def test_without_it_a_late_signal_can_kill_the_exit() -> None:
    """The test above can fail: the same child, shielded only, dies of a signal at least once."""
    codes = [run_child("") for _ in range(5)]
    assert -15 in codes, codes


@pytest.mark.parametrize("sig", shutdown.STOP_SIGNALS, ids=lambda s: s.name)
def test_stopped_ignores_every_stop_signal(sig: object) -> None:
    import signal
    before = {s: signal.getsignal(s) for s in shutdown.STOP_SIGNALS}
    try:
        shutdown.stopped()
        assert signal.getsignal(sig) is signal.SIG_IGN
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
