"""Capped exponential backoff: the pause before a failed step is tried again."""

from __future__ import annotations

import random


class Backoff:
    """Capped exponential backoff with a little jitter, so peers do not retry in step."""

    def __init__(self, initial: float = 0.5, cap: float = 10.0) -> None:
        self.initial, self.cap = initial, cap
        self.current = initial

    def next(self) -> float:
        delay = self.current
        self.current = min(self.current * 2, self.cap)
        return delay * random.uniform(0.8, 1.2)

    def reset(self) -> None:
        self.current = self.initial
