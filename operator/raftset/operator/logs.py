"""Which of kopf's per-object log lines the operator keeps.

kopf logs a success line for every handler call. For the drift checks and the handlers that
ring a cluster's alarm on a watch event (raftset.operator.handlers) those say nothing (a failure is still logged, and made an Event), and at hundreds of
clusters they were hundreds of lines a second, each costing the operator CPU to write.
"""

from __future__ import annotations

import logging
import re

_ROUTINE = re.compile(r"Handler '(drift-[^']*|pods-ring|leases-ring|[a-z]+-annotations)' succeeded\.")


def routine(message: str) -> bool:
    """Is this kopf's success line of a drift check or of an alarm ring?"""
    return _ROUTINE.fullmatch(message) is not None


class DropRoutine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not routine(record.getMessage())
