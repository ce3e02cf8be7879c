"""The registry that picks a sink for a target."""

from __future__ import annotations

from app.domain.occurrence import Attempted, Delivery, Unsent
from app.sinks.base import Sink
from app.sinks.rabbitmq import RabbitMQSink


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
