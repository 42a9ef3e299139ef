"""A loop that runs beside a test for the length of a `with` block.

The watchers and stand-ins a test keeps running while it acts share this shape: a daemon
thread started on entry, told to stop and joined on exit, so a failing test never leaves one
writing into the next.
"""

from __future__ import annotations

import threading
from typing import Self


class Background:
    """Runs `_run` in a daemon thread from `__enter__` to `__exit__`; `_run` loops until `_stop` is set."""

    JOIN_S = 10.0

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.JOIN_S)

    def _run(self) -> None:
        raise NotImplementedError
