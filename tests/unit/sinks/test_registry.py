"""Which sink a delivery goes to."""

from __future__ import annotations

from app.domain.occurrence import Delivered, Delivery, Outcome, Unsent
from app.domain.target import RabbitMQTarget
from app.sinks.registry import Sinks
from tests.factories import make_delivery


class Recording:
    def __init__(self) -> None:
        self.seen: list[Delivery] = []

    async def deliver(self, delivery: Delivery) -> Outcome:
        self.seen.append(delivery)
        return Delivered()


async def test_a_delivery_goes_to_the_sink_of_its_target_type() -> None:
    webhook = Recording()
    delivery = make_delivery()

    outcome = await Sinks({"webhook": webhook}).deliver(delivery)

    assert outcome == Delivered()
    assert webhook.seen == [delivery]


async def test_a_target_type_this_replica_cannot_serve_is_handed_back_uncharged() -> None:
    target = RabbitMQTarget(type="rabbitmq", exchange="", routing_key="jobs")

    outcome = await Sinks({"webhook": Recording()}).deliver(make_delivery(target=target))

    # Not the target's failure: no attempt is charged, it waits for a replica that can.
    assert isinstance(outcome, Unsent)
    assert "rabbitmq" in outcome.error
