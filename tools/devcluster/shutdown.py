"""How `up` and `run` stop: the first SIGINT, SIGTERM or SIGHUP starts the teardown, later ones cannot cut it.

Ctrl-C (SIGINT), `kill` (SIGTERM), a closed terminal (SIGHUP) and make's forwarded second
SIGTERM all end the same way: `Stopping` is raised once in the main thread, and from then
on every stop signal is only noted. A signal that arrived inside the teardown used to raise
KeyboardInterrupt there and leave the plane's temp dir, keys included, behind.
"""

from __future__ import annotations

import signal
import sys

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopping(KeyboardInterrupt):
    """A stop signal arrived; a KeyboardInterrupt so that code that handles Ctrl-C handles it too."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _noted(signum: int, _frame: object) -> None:
    print(f"\n{signal.Signals(signum).name}: already stopping (kill -9 abandons the teardown "
          "and leaves temporary files behind)", file=sys.stderr, flush=True)


def _raise_once(signum: int, _frame: object) -> None:
    shield()
    raise Stopping(signum)


def on_stop_signals() -> None:
    """The first stop signal raises `Stopping` in the main thread; later ones are noted."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _raise_once)


def shield() -> None:
    """From here on, stop signals are noted and do not interrupt."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _noted)


def stopped() -> None:
    """The teardown is over: stop signals are ignored from here to the exit.

    Python restores the default action of every signal it handled when the interpreter
    finalizes, so a late second SIGTERM (make's forwarded one) would otherwise kill the
    process on its way out and turn a clean exit 0 into -15. An ignored signal stays ignored.
    """
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)

