"""A RabbitMQ target's attempts in the attempt log: no HTTP status, no reply body."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import aio_pika
import pytest

from tests.integration.conftest import Harness

pytestmark = pytest.mark.rabbitmq


@pytest.fixture
async def queue_name(amqp_url: str) -> AsyncIterator[str]:
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(f"chronoq-test-{uuid.uuid4().hex[:12]}", durable=True)
        yield queue.name
        await queue.delete(if_unused=False, if_empty=False)
    finally:
        await connection.close()


async def test_a_published_attempt_has_no_status_code_or_excerpt(
    amqp_harness: Harness, queue_name: str
) -> None:
    created = await amqp_harness.create(
        target={"type": "rabbitmq", "exchange": "", "routing_key": queue_name}
    )

    assert await amqp_harness.step() == 1

    page = await amqp_harness.get(f"/v1/occurrences/{created['next_occurrence_id']}/attempts")
    (attempt,) = page["items"]
    assert attempt["outcome"] == "delivered"
    assert attempt["status_code"] is None
    assert attempt["response_excerpt"] is None
    assert attempt["error"] is None
    assert attempt["replica"] == "test"
