"""W3C Trace Context: the `traceparent` a create request carries, checked before it is
stored with the schedule and sent on every delivery of its occurrences (docs/tracing.md).

Only version 00 is taken, exactly as the recommendation writes it: 2 + 32 + 16 + 2
lowercase hex digits joined by dashes, with a trace id and a parent id that are not all
zeros. Anything else is no trace context: ignored, never stored, never an error.
"""

from __future__ import annotations

import re

# version 00, trace id, parent (span) id, trace flags
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
_ZERO_TRACE = "0" * 32
_ZERO_PARENT = "0" * 16

TRACEPARENT_LENGTH = 55
TRACE_ID_LENGTH = 32


def valid_traceparent(value: str | None) -> str | None:
    """`value` when it is a valid version-00 traceparent, else None."""
    if value is None or len(value) != TRACEPARENT_LENGTH:
        return None
    match = _TRACEPARENT.fullmatch(value)
    if match is None or match[1] == _ZERO_TRACE or match[2] == _ZERO_PARENT:
        return None
    return value


def trace_id(traceparent: str | None) -> str | None:
    """The trace id (32 hex digits) of a valid traceparent; None for None."""
    return None if traceparent is None else traceparent[3:35]
