"""`python -m tools.devcluster up` stops cleanly on every stop signal: no process, no temp dir, no key left.

A SIGTERM that arrived inside the teardown used to raise KeyboardInterrupt there and leave
the plane's temporary directory, CA and admin keys included, behind (issue #14). The
apiserver-only plane has the same teardown as the full one (tools/devcluster/shutdown.py,
Plane.stop); `make run`'s own stop is checked by the e2e tier's whole-run test. A signal
after the teardown (`shutdown.stopped()`, on the way out) is tests/unit/test_devcluster_shutdown.py's.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from tests.harness.cli import Cli, existing, survivors

pytestmark = pytest.mark.k8s

# name -> signal: Ctrl-C, kill, a closed terminal.
CASES = {"ctrl-c": signal.SIGINT, "sigterm": signal.SIGTERM, "sighup": signal.SIGHUP}


@contextmanager
def running_plane() -> Iterator[tuple[Cli, Path]]:
    """`up --apiserver-only`, started and serving (keys on disk, at least its etcd and
    kube-apiserver running); killed if the test leaves it running."""
    cli = Cli("up", "--apiserver-only")
    try:
        workdir = Path(cli.wait_match(r"export KUBECONFIG=(\S+)/admin\.kubeconfig", 180).group(1))
        cli.wait_match(r"stops it\.", 10)
        assert len(cli.processes()) >= 3, f"the CLI, etcd and kube-apiserver: {cli.processes()}"
        assert (workdir / "pki").is_dir(), "the keys exist while it runs"
        yield cli, workdir
    finally:
        cli.close()


def assert_nothing_left(cli: Cli, code: int, recorded: dict[int, int], workdir: Path) -> None:
    assert code == 0, cli.output[-3000:]
    assert survivors(recorded) == []
    assert existing([workdir]) == [], f"{workdir} left behind:\n{cli.output[-3000:]}"


@pytest.mark.parametrize("case", CASES)
def test_a_stop_signal_leaves_nothing_behind(case: str) -> None:
    sig = CASES[case]
    with running_plane() as (cli, workdir):
        recorded = cli.processes()
        code = cli.stop(sig, timeout=60)
    assert_nothing_left(cli, code, recorded, workdir)
    assert f"stopping ({sig.name})" in cli.output


def test_a_second_signal_inside_the_teardown_is_noted_and_does_not_cut_it() -> None:
    """make forwards a second SIGTERM, users press Ctrl-C twice. The teardown can end in under
    200 ms, so the second signal is made to land inside it: the recorded kube-apiserver is
    stopped (SIGSTOP) before the first signal, and the teardown waits for it to exit until
    the test continues it (SIGCONT) after the second."""
    with running_plane() as (cli, workdir):
        recorded = cli.processes()
        (apiserver,) = cli.processes_named("kube-apiserver")
        os.kill(apiserver, signal.SIGSTOP)
        try:
            cli.signal(signal.SIGTERM)
            cli.wait_match(r"^stopping \(SIGTERM\)$", 30)
            cli.signal(signal.SIGTERM)
            cli.wait_match(r"^SIGTERM: already stopping", 30)
            assert apiserver in cli.processes(), "the teardown was still waiting for the apiserver"
            assert workdir.exists(), "the teardown had not removed anything yet"
        finally:
            with suppress(ProcessLookupError):  # the teardown's SIGKILL after its grace reaped it
                os.kill(apiserver, signal.SIGCONT)
        code = cli.wait_exit(60, "after the apiserver was continued")
    assert_nothing_left(cli, code, recorded, workdir)
