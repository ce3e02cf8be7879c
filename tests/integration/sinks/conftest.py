"""Fixtures of the sink cases: a broker channel of the test's own, a durable queue that is
deleted afterwards, and a harness whose RabbitMQ sink has connected."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import aio_pika
import pytest

from tests.integration.conftest import Harness


@pytest.fixture
async def broker(amqp_url: str) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
    connection = await aio_pika.connect(amqp_url)
    try:
        yield await connection.channel()
    finally:
        await connection.close()


@pytest.fixture
async def queue(broker: aio_pika.abc.AbstractChannel) -> AsyncIterator[aio_pika.abc.AbstractQueue]:
    declared = await broker.declare_queue(f"chronoq-test-{uuid.uuid4().hex[:12]}", durable=True)
    try:
        yield declared
    finally:
        await declared.delete(if_unused=False, if_empty=False)


@pytest.fixture
async def amqp_harness(make_harness: Callable[..., Any], amqp_url: str) -> AsyncIterator[Harness]:
    async with make_harness(amqp_url=amqp_url) as harness:
        deadline = time.monotonic() + 15
        while not (harness.sinks.broker and harness.sinks.broker.connected):
            assert time.monotonic() < deadline, "the sink never connected to RabbitMQ"
            await asyncio.sleep(0.05)
        yield harness
