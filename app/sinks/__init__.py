"""Outbound delivery to targets; no database access."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp.abc import AbstractResolver

from app.domain.addresses import AddressPolicy
from app.settings import Settings
from app.sinks.base import Sink
from app.sinks.rabbitmq import RabbitMQSink
from app.sinks.registry import Sinks
from app.sinks.webhook import WebhookSink


@asynccontextmanager
async def open_sinks(
    settings: Settings, *, resolver: AbstractResolver | None = None
) -> AsyncIterator[Sinks]:
    """The process's sinks: the webhook client always, RabbitMQ when AMQP_URL is set.
    `resolver` answers webhook DNS lookups instead of the system's (tests)."""
    webhook = WebhookSink(
        concurrency=settings.concurrency,
        max_timeout=settings.dispatch_timeout,
        policy=AddressPolicy.of(*settings.target_rules()),
        resolver=resolver,
        signing_secrets=settings.webhook_secrets,
    )
    broker = (
        RabbitMQSink(settings.amqp_url, concurrency=settings.concurrency)
        if settings.amqp_url
        else None
    )
    by_type: dict[str, Sink] = {"webhook": webhook}
    await webhook.open()
    try:
        if broker is not None:
            await broker.open()
            by_type["rabbitmq"] = broker
        yield Sinks(by_type, broker=broker)
    finally:
        if broker is not None:
            await broker.close()
        await webhook.close()
