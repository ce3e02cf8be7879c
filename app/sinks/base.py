"""What every sink shares: the protocol, the outcome of a delivered attempt, and how a
shortage of this machine's own resources is told from a target's failure."""

from __future__ import annotations

import errno
import os
from typing import Protocol

from app.domain.occurrence import Attempted, Delivered, Delivery

# A delivered attempt with no reply to record (a broker's confirm).
DELIVERED = Delivered()

# Errors of this machine, not of a target: out of descriptors, memory or buffers.
_LOCAL_SHORTAGES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def local_shortage(error: BaseException | None) -> str | None:
    """What this machine ran out of, when `error` (or an error that caused it) is a local
    resource error rather than the target's failure; None otherwise."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, OSError) and error.errno in _LOCAL_SHORTAGES:
            return os.strerror(error.errno)
        error = error.__cause__ or error.__context__
        seen += 1
    return None


class Sink(Protocol):
    async def deliver(self, delivery: Delivery) -> Attempted:
        """Attempt one delivery; a target failure is an outcome, never an exception."""
        ...
