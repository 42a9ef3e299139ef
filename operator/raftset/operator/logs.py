"""Which of kopf's per-object log lines the operator keeps.

kopf logs a success line for every handler call. For the reconcile timer and the drift
checks those say nothing (a failure is still logged, and made an Event), and at hundreds of
clusters they were hundreds of lines a second, each costing the operator CPU to write.
"""

from __future__ import annotations

import logging
import re

_ROUTINE = re.compile(r"(Timer '[^']*'|Handler 'drift-[^']*') succeeded\.")


def routine(message: str) -> bool:
    """Is this kopf's success line of a reconcile tick or of a drift check?"""
    return _ROUTINE.fullmatch(message) is not None


class DropRoutine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not routine(record.getMessage())
