"""The sink protocol and the registry that picks a sink for a target."""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING, Protocol

from app.domain.occurrence import Attempted, Delivery, Unsent

if TYPE_CHECKING:
    from app.sinks.rabbitmq import RabbitMQSink


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


class Sinks:
    """One sink per target type, shared by every delivery of the process."""

    def __init__(self, by_type: dict[str, Sink], *, broker: RabbitMQSink | None = None) -> None:
        self._by_type = by_type
        self.broker = broker

    async def deliver(self, delivery: Delivery) -> Attempted:
        sink = self._by_type.get(delivery.target.type)
        if sink is None:
            # A replica without this sink (say, one without AMQP_URL) leaves the occurrence
            # to a replica that has it, rather than charging or dead-lettering it.
            return Unsent(f"this replica cannot deliver {delivery.target.type} targets")
        return await sink.deliver(delivery)
