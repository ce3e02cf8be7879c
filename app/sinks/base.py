"""The sink protocol and the registry that picks a sink for a target."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from app.domain.occurrence import Delivery, Outcome, Retryable

if TYPE_CHECKING:
    from app.sinks.rabbitmq import RabbitMQSink


class Sink(Protocol):
    async def deliver(self, delivery: Delivery) -> Outcome:
        """Attempt one delivery; a target failure is an outcome, never an exception."""
        ...


class Sinks:
    """One sink per target type, shared by every delivery of the process."""

    def __init__(self, by_type: dict[str, Sink], *, broker: RabbitMQSink | None = None) -> None:
        self._by_type = by_type
        self.broker = broker

    async def deliver(self, delivery: Delivery) -> Outcome:
        sink = self._by_type.get(delivery.target.type)
        if sink is None:
            # A replica without this sink (say, one without AMQP_URL) leaves the occurrence
            # to a replica that has it, rather than dead-lettering it.
            return Retryable(f"this replica cannot deliver {delivery.target.type} targets")
        return await sink.deliver(delivery)
