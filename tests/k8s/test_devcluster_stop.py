"""`python -m tools.devcluster up` stops cleanly on every stop signal: no process, no temp dir, no key left.

A SIGTERM that arrived inside the teardown used to raise KeyboardInterrupt there and leave
the plane's temporary directory, CA and admin keys included, behind (issue #14). The
apiserver-only plane has the same teardown as the full one (tools/devcluster/shutdown.py,
Plane.stop); `make run`'s own stop is checked by the e2e tier's whole-run test.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.harness.cli import Cli, existing, survivors

pytestmark = pytest.mark.k8s

# name -> (signal, repeated until the exit): make forwards a second SIGTERM, users press Ctrl-C twice.
CASES = {
    "ctrl-c": (signal.SIGINT, False),
    "sigterm": (signal.SIGTERM, False),
    "repeated-sigterm": (signal.SIGTERM, True),
    "sighup": (signal.SIGHUP, False),
}


@pytest.mark.parametrize("case", CASES)
def test_a_stop_signal_leaves_nothing_behind(case: str) -> None:
    cli = Cli("up", "--apiserver-only")
    try:
        workdir = Path(cli.wait_match(r"export KUBECONFIG=(\S+)/admin\.kubeconfig", 180).group(1))
        cli.wait_match(r"stops it\.", 10)
        recorded = cli.processes()
        assert len(recorded) >= 3, f"the CLI, etcd and kube-apiserver: {recorded}"
        assert (workdir / "pki").is_dir(), "the keys exist while it runs"
        sig, repeat = CASES[case]
        code = cli.stop(sig, timeout=60, repeat=repeat)
    finally:
        cli.close()
    assert code == 0, cli.output[-3000:]
    assert survivors(recorded) == []
    assert existing([workdir]) == [], f"{workdir} left behind:\n{cli.output[-3000:]}"
    assert f"stopping ({sig.name})" in cli.output
    if repeat:
        assert "already stopping" in cli.output, "later signals landed in the teardown and did not cut it"
