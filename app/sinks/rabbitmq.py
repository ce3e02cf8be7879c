"""RabbitMQ delivery: confirmed, mandatory publishes over one self-healing connection.

Invariant: an occurrence counts as delivered only when the broker acked its publish.

Publishes share one long-lived channel in publisher-confirm mode: many are in flight on it at
once, each waiting for its own confirm. A nack fails its own publish only, and so does a return
(unroutable, mandatory): aiormq maps a returned message to its publish by message id, which is
the occurrence id. What a shared channel cannot isolate is a channel error: a publish to a
missing exchange makes the broker close the whole channel (404 NOT_FOUND), and every publish on
it that was not yet confirmed fails with it. Two rules keep such an error to the deliveries
addressed to that exchange:

- Only exchanges known to exist are published to on the shared channel: the default exchange,
  and a named exchange for `known_for` seconds after the broker last acked, returned or nacked
  a publish to it (each of which means it found the exchange). A delivery to any other
  exchange is published on a channel of its own (idle ones are kept for reuse), as a probe: a
  missing exchange closes only that channel and fails only that delivery.
- When the shared channel is closed by an error that names an exchange (one deleted while it
  was known), the deliveries addressed to that exchange fail, it is no longer known, and every
  other delivery that was in flight on the channel is published again, each on a channel of
  its own. The broker may have routed some of those before it closed the channel, so a
  consumer can receive such a message twice: delivery is at least once, and the stable message
  id (the occurrence id) is what lets a consumer drop the second copy. A channel error that
  names no exchange is handled alike: every delivery on the channel is published again on a
  channel of its own, where the one that caused the error fails alone.

A lost connection fails the publishes in flight as retryable attempts (nothing is published
again on a connection that is gone), and the connection comes back by itself.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Mapping
from contextlib import suppress
from datetime import UTC, datetime
from urllib.parse import urlsplit

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, DeliveryMode

from app.domain.ids import format_instant
from app.domain.occurrence import Delivery, FailureReason, Outcome, Permanent, Retryable
from app.domain.target import RabbitMQTarget
from app.sinks.base import DELIVERED

log = logging.getLogger(__name__)

RECONNECT_MIN = 0.5
RECONNECT_MAX = 5.0
KNOWN_FOR = 30.0
"""Seconds a named exchange stays known after the broker last showed that it exists."""
KNOWN_LIMIT = 10_000
CHANNEL_OPEN_TIMEOUT = 10.0
# The longest a close waits for the connecting task to end and for the broker to answer
# the connection's close: a broker that does not answer cannot hold a replica's shutdown.
CLOSE_TIMEOUT = 5.0

# What a publish on a channel the broker closed raises: the close reason, or (a publish that
# started after the close) aiormq's invalid-state error.
_CHANNEL_ERRORS = (aiormq.exceptions.AMQPChannelError, aiormq.exceptions.ChannelInvalidStateError)
_NAMED_EXCHANGE = re.compile(r"\bexchange '(.*)' in vhost '")


def broker_host(url: str) -> str:
    """Host and port of an AMQP URL, for messages: never the credentials."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{host}:{parts.port}" if parts.port else host


def _routing_header(headers: Mapping[str, object]) -> str | None:
    """A header the broker reads as routing information (CC, BCC: sender-selected
    distribution), which a target may not set."""
    return next((name for name in headers if name.lower() in ("cc", "bcc")), None)


class RabbitMQSink:
    """Publishes deliveries; reconnects by itself whenever the connection is lost."""

    def __init__(self, url: str, *, concurrency: int, known_for: float = KNOWN_FOR) -> None:
        self._url = url
        self._host = broker_host(url)
        self._max_channels = concurrency
        self._known_for = known_for
        self._connection: AbstractConnection | None = None
        # The shared channel (aio-pika's, which owns aiormq's that publishes) and the task
        # opening it.
        self._shared: tuple[AbstractChannel, aiormq.Channel] | None = None
        self._opening: asyncio.Task[aiormq.Channel] | None = None
        # Named exchanges the broker showed to exist, each until a monotonic instant.
        self._known: dict[str, float] = {}
        # Idle channels for publishes that have a channel of their own.
        self._idle: list[AbstractChannel] = []
        self._task: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        # Set by close(): the connecting task ends even where a cancel did not reach it.
        self._closed = False

    @property
    def connected(self) -> bool:
        connection = self._connection
        return connection is not None and not connection.is_closed

    async def open(self) -> None:
        """Start connecting in the background: the service starts even while the broker is
        down, and deliveries retry until it is back."""
        self._closed = False
        self._task = asyncio.create_task(self._stay_connected(), name="chronoq-amqp")

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            # A cancel that lands as the connect completes can be lost inside it (Python
            # 3.11's wait_for returns the result instead); the task then sees `_closed`.
            task.cancel()
            await asyncio.wait({task}, timeout=CLOSE_TIMEOUT)
            if not task.done():
                log.warning("the RabbitMQ connection task did not end; closing without it")
        connection, self._connection = self._connection, None
        self._forget_channels()
        if connection is not None:
            await _close_quietly(connection)

    def _forget_channels(self) -> None:
        """Drop every channel and what was learnt on them (a new connection starts afresh:
        a broker restart may have lost exchanges that were not durable)."""
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
        self._opening = None
        self._shared = None
        self._known.clear()
        self._idle.clear()

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
            if self._closed:
                await _close_quietly(connection)
                return
            delay = RECONNECT_MIN
            lost = asyncio.Event()
            connection.close_callbacks.add(lambda *_, lost=lost: lost.set())
            self._forget_channels()
            self._connection = connection
            self._start_opening(connection)
            log.info("connected to RabbitMQ at %s", self._host)
            await lost.wait()
            self._connection = None
            self._forget_channels()
            log.warning("lost the RabbitMQ connection to %s; reconnecting", self._host)

    def _start_opening(self, connection: AbstractConnection) -> asyncio.Task[aiormq.Channel]:
        opening = asyncio.get_running_loop().create_task(self._open_shared(connection))
        # A failure is seen by the publishes that wait for it, or by none (the next publish
        # opens again): it is retrieved here so that it is never reported as unretrieved.
        opening.add_done_callback(_retrieve)
        self._opening = opening
        return opening

    async def _open_shared(self, connection: AbstractConnection) -> aiormq.Channel:
        async with asyncio.timeout(CHANNEL_OPEN_TIMEOUT):
            channel = connection.channel(publisher_confirms=True, on_return_raises=True)
            await channel
            raw = await channel.get_underlay_channel()
        assert isinstance(raw, aiormq.Channel)
        if self._connection is connection:
            self._shared = (channel, raw)
        return raw

    async def _shared_channel(self, connection: AbstractConnection) -> aiormq.Channel:
        shared = self._shared
        if shared is not None and not shared[1].is_closed:
            return shared[1]
        opening = self._opening
        if opening is None or opening.done():
            opening = self._start_opening(connection)
        # Shielded: a publish that gives up (the dispatch timeout) leaves the opening to the
        # publishes that still wait for it.
        return await asyncio.shield(opening)

    def _is_known(self, name: str) -> bool:
        if name == "":
            return True
        until = self._known.get(name)
        return until is not None and until > time.monotonic()

    def _found(self, name: str) -> None:
        if name == "":
            return
        now = time.monotonic()
        if name not in self._known and len(self._known) >= KNOWN_LIMIT:
            self._known = {key: until for key, until in self._known.items() if until > now}
            if len(self._known) >= KNOWN_LIMIT:
                self._known.clear()
        self._known[name] = now + self._known_for

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

    def properties(
        self, delivery: Delivery, target: RabbitMQTarget
    ) -> aiormq.spec.Basic.Properties:
        headers: dict[str, object] = dict(target.headers)
        headers.update(
            {
                "x-schedule-id": str(delivery.schedule_id),
                "x-scheduled-for": format_instant(delivery.fire_at),
                "x-attempt": delivery.attempt,
                "x-chronoq-tenant": delivery.tenant,
            }
        )
        if delivery.traceparent is not None:
            # The delivery's trace context (docs/tracing.md), over a target's own.
            headers["traceparent"] = delivery.traceparent
        # Built here rather than through aio_pika.Message (ten times the CPU); the same bytes
        # on the wire, priority 0 included, as aio-pika's message gave.
        return aiormq.spec.Basic.Properties(
            message_id=str(delivery.occurrence_id),
            message_type=delivery.event_type,
            content_type="application/json",
            delivery_mode=int(DeliveryMode.PERSISTENT),
            priority=0,
            timestamp=datetime.now(UTC),
            headers=headers,  # type: ignore[arg-type]
        )

    async def deliver(self, delivery: Delivery) -> Outcome:
        target = delivery.target
        assert isinstance(target, RabbitMQTarget)
        connection = self._connection
        if connection is None or connection.is_closed:
            return _broker_failed(f"RabbitMQ at {self._host} is unreachable")
        if (refused := _routing_header(target.headers)) is not None:
            # Never published: the broker closes the channel, and every publish on it
            # with it, for a CC or BCC that is not an array (rows stored before the API
            # refused them).
            return Permanent(
                f"header {refused!r} is routing information RabbitMQ closes the channel "
                "for; route with routing_key instead"
            )
        properties = self.properties(delivery, target)
        if self._is_known(target.exchange):
            outcome = await self._publish_shared(connection, delivery.body, properties, target)
            if outcome is not None:
                return outcome
        return await self._publish_alone(connection, delivery.body, properties, target)

    async def _publish_shared(
        self,
        connection: AbstractConnection,
        body: bytes,
        properties: aiormq.spec.Basic.Properties,
        target: RabbitMQTarget,
    ) -> Outcome | None:
        """Publish on the shared channel; None when the channel was closed under this publish
        by an error that is not this delivery's own (publish it again on a channel of its
        own)."""
        try:
            channel = await self._shared_channel(connection)
        except Exception as exc:
            return _broker_failed(
                f"RabbitMQ at {self._host}: cannot open a channel ({_describe(exc)})"
            )
        try:
            await _room_to_publish(channel)
            # Not waiting for the frame to reach the socket (aio-pika's publish does, holding
            # the channel's lock meanwhile): publishes would queue behind each other's
            # writes, one per turn of a busy event loop. The confirm is what counts, and the
            # dispatcher bounds how many are in flight.
            await channel.basic_publish(
                body,
                exchange=target.exchange,
                routing_key=target.routing_key,
                properties=properties,
                mandatory=True,
                wait=False,
            )
        except aiormq.exceptions.PublishError as exc:
            self._found(target.exchange)
            return _broker_failed(f"unroutable: {_return_reason(exc)}")
        except aiormq.exceptions.DeliveryError as exc:
            self._found(target.exchange)
            return _broker_failed(f"the broker refused the message (nack): {_describe(exc)}")
        except _CHANNEL_ERRORS as exc:
            if connection.is_closed:
                return _broker_failed(f"RabbitMQ at {self._host}: {_describe(exc)}")
            named = _named_exchange(exc)
            if named is not None:
                self._known.pop(named, None)
            if target.exchange != "" and _names(exc, target.exchange):
                self._known.pop(target.exchange, None)
                return _broker_failed(f"channel error: {_describe(exc)}")
            return None
        except Exception as exc:
            return _broker_failed(f"RabbitMQ at {self._host}: {_describe(exc)}")
        self._found(target.exchange)
        return DELIVERED

    async def _publish_alone(
        self,
        connection: AbstractConnection,
        body: bytes,
        properties: aiormq.spec.Basic.Properties,
        target: RabbitMQTarget,
    ) -> Outcome:
        """Publish on a channel of its own: a channel error fails this delivery only."""
        try:
            channel = await self._take_channel(connection)
        except Exception as exc:
            return _broker_failed(
                f"RabbitMQ at {self._host}: cannot open a channel ({_describe(exc)})"
            )
        healthy = False
        try:
            raw = await channel.get_underlay_channel()
            await raw.basic_publish(
                body,
                exchange=target.exchange,
                routing_key=target.routing_key,
                properties=properties,
                mandatory=True,
            )
            healthy = True
            self._found(target.exchange)
            return DELIVERED
        except aiormq.exceptions.PublishError as exc:
            healthy = True
            self._found(target.exchange)
            return _broker_failed(f"unroutable: {_return_reason(exc)}")
        except aiormq.exceptions.DeliveryError as exc:
            healthy = True
            self._found(target.exchange)
            return _broker_failed(f"the broker refused the message (nack): {_describe(exc)}")
        except aiormq.exceptions.AMQPChannelError as exc:
            self._known.pop(target.exchange, None)
            return _broker_failed(f"channel error: {_describe(exc)}")
        except Exception as exc:
            return _broker_failed(f"RabbitMQ at {self._host}: {_describe(exc)}")
        finally:
            # A publish cut off mid-way (error or timeout) leaves its channel in an
            # unknown state: it is closed rather than reused.
            if healthy:
                self._give_back(channel)
            else:
                self._discard(channel)


async def _close_quietly(closable: AbstractChannel | AbstractConnection) -> None:
    """Close a channel or the connection, waiting at most CLOSE_TIMEOUT for the broker;
    whatever fails is its end anyway."""
    if closable.is_closed:
        return
    with suppress(Exception):
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await closable.close()


async def _room_to_publish(channel: aiormq.Channel) -> None:
    # A frame the broker gets on a channel after its Close-Ok is a connection error (504
    # CHANNEL_ERROR) that would fail every publish of the process. aiormq answers the
    # broker's Close at once but marks the channel closed a few turns of the loop later, and
    # its publish does not look again after waiting for room in the connection's bounded
    # frame queue. So the check is made here, in the same turn as the publish that follows:
    # with room in the queue (and the channel's lock free: this channel makes no other
    # calls) that publish queues its frames without suspending, so no Close is handled in
    # between.
    delay = 0.0
    while True:
        if channel.is_closed or getattr(channel, "_close_exception", None) is not None:
            raise aiormq.exceptions.ChannelInvalidStateError("the broker closed the channel")
        if not channel.write_queue.full():
            return
        await asyncio.sleep(delay)
        delay = 0.001


def _retrieve(task: asyncio.Task[aiormq.Channel]) -> None:
    if not task.cancelled():
        task.exception()


def _named_exchange(exc: BaseException) -> str | None:
    """The exchange a channel error names ("NOT_FOUND - no exchange 'x' in vhost '/'")."""
    found = _NAMED_EXCHANGE.search(str(exc))
    return found.group(1) if found else None


def _names(exc: BaseException, exchange: str) -> bool:
    return f"exchange '{exchange}' in vhost '" in str(exc)


def _broker_failed(error: str) -> Retryable:
    """A publish the broker did not take: unreachable, refused, returned or closed."""
    return Retryable(error, reason=FailureReason.BROKER)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _return_reason(exc: aiormq.exceptions.PublishError) -> str:
    returned = exc.message.delivery if exc.message is not None else None
    reply = getattr(returned, "reply_text", None) or "NO_ROUTE"
    exchange = getattr(returned, "exchange", "") or "(default)"
    routing_key = getattr(returned, "routing_key", "")
    return f"{reply} (exchange {exchange}, routing key {routing_key!r})"
