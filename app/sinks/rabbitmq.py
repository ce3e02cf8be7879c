"""RabbitMQ delivery: confirmed, mandatory publishes over one self-healing connection.

Invariant: an occurrence counts as delivered only when the broker acked its publish. Each
publish has a channel to itself while it runs, so a channel error (a missing exchange, say)
fails that one delivery; the channel is dropped and every other delivery carries on.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from datetime import UTC, datetime
from urllib.parse import urlsplit

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractExchange, DeliveryMode

from app.domain.ids import format_instant
from app.domain.occurrence import Delivery, Outcome, Retryable
from app.domain.target import RabbitMQTarget
from app.sinks.webhook import DELIVERED

log = logging.getLogger(__name__)

RECONNECT_MIN = 0.5
RECONNECT_MAX = 5.0


def broker_host(url: str) -> str:
    """Host and port of an AMQP URL, for messages: never the credentials."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{host}:{parts.port}" if parts.port else host


class RabbitMQSink:
    """Publishes deliveries; reconnects by itself whenever the connection is lost."""

    def __init__(self, url: str, *, concurrency: int) -> None:
        self._url = url
        self._host = broker_host(url)
        self._max_channels = concurrency
        self._connection: AbstractConnection | None = None
        self._idle: list[AbstractChannel] = []
        self._task: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def connected(self) -> bool:
        connection = self._connection
        return connection is not None and not connection.is_closed

    async def open(self) -> None:
        """Start connecting in the background: the service starts even while the broker is
        down, and deliveries retry until it is back."""
        self._task = asyncio.create_task(self._stay_connected(), name="chronoq-amqp")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
        connection, self._connection = self._connection, None
        self._idle.clear()
        if connection is not None and not connection.is_closed:
            with suppress(Exception):
                await connection.close()

    async def _stay_connected(self) -> None:
        delay = RECONNECT_MIN
        while True:
            try:
                connection = await aio_pika.connect(self._url, timeout=10)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "cannot connect to RabbitMQ at %s (%s); retrying in %.1fs",
                    self._host,
                    type(exc).__name__,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX)
                continue
            delay = RECONNECT_MIN
            lost = asyncio.Event()
            connection.close_callbacks.add(lambda *_, lost=lost: lost.set())
            self._idle.clear()
            self._connection = connection
            log.info("connected to RabbitMQ at %s", self._host)
            await lost.wait()
            self._connection = None
            self._idle.clear()
            log.warning("lost the RabbitMQ connection to %s; reconnecting", self._host)

    async def _take_channel(self, connection: AbstractConnection) -> AbstractChannel:
        while self._idle:
            channel = self._idle.pop()
            if not channel.is_closed:
                return channel
        channel = connection.channel(publisher_confirms=True, on_return_raises=True)
        await channel
        return channel

    def _give_back(self, channel: AbstractChannel) -> None:
        if not channel.is_closed and len(self._idle) < self._max_channels:
            self._idle.append(channel)
        else:
            self._discard(channel)

    def _discard(self, channel: AbstractChannel) -> None:
        """Close a channel in the background; the task is held until it is done."""
        task = asyncio.get_running_loop().create_task(_close_quietly(channel))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def message(self, delivery: Delivery, target: RabbitMQTarget) -> aio_pika.Message:
        headers: dict[str, object] = dict(target.headers)
        headers.update(
            {
                "x-schedule-id": str(delivery.schedule_id),
                "x-scheduled-for": format_instant(delivery.fire_at),
                "x-attempt": delivery.attempt,
            }
        )
        return aio_pika.Message(
            body=delivery.body,
            message_id=str(delivery.occurrence_id),
            type=delivery.event_type,
            content_type="application/json",
            delivery_mode=DeliveryMode.PERSISTENT,
            timestamp=datetime.now(UTC),
            headers=headers,  # type: ignore[arg-type]
        )

    async def deliver(self, delivery: Delivery) -> Outcome:
        target = delivery.target
        assert isinstance(target, RabbitMQTarget)
        connection = self._connection
        if connection is None or connection.is_closed:
            return Retryable(f"RabbitMQ at {self._host} is unreachable")
        try:
            channel = await self._take_channel(connection)
        except Exception as exc:
            return Retryable(f"RabbitMQ at {self._host}: cannot open a channel ({_describe(exc)})")
        healthy = False
        try:
            exchange: AbstractExchange = (
                channel.default_exchange
                if target.exchange == ""
                else await channel.get_exchange(target.exchange, ensure=False)
            )
            await exchange.publish(
                self.message(delivery, target), target.routing_key, mandatory=True
            )
            healthy = True
            return DELIVERED
        except aiormq.exceptions.PublishError as exc:
            healthy = True
            return Retryable(f"unroutable: {_return_reason(exc)}")
        except aiormq.exceptions.DeliveryError as exc:
            healthy = True
            return Retryable(f"the broker refused the message (nack): {_describe(exc)}")
        except aiormq.exceptions.AMQPChannelError as exc:
            return Retryable(f"channel error: {_describe(exc)}")
        except Exception as exc:
            return Retryable(f"RabbitMQ at {self._host}: {_describe(exc)}")
        finally:
            # A publish cut off mid-way (error or timeout) leaves its channel in an
            # unknown state: it is closed rather than reused.
            if healthy:
                self._give_back(channel)
            else:
                self._discard(channel)


async def _close_quietly(channel: AbstractChannel) -> None:
    with suppress(Exception):
        await channel.close()


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _return_reason(exc: aiormq.exceptions.PublishError) -> str:
    returned = exc.message.delivery if exc.message is not None else None
    reply = getattr(returned, "reply_text", None) or "NO_ROUTE"
    exchange = getattr(returned, "exchange", "") or "(default)"
    routing_key = getattr(returned, "routing_key", "")
    return f"{reply} (exchange {exchange}, routing key {routing_key!r})"
