"""Operator tools for the broker: declare a topology from a file, peek at a queue.

Chronoq itself declares nothing: exchanges and queues belong to the user. These helpers
exist so that the user can set them up and look into them without writing code.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from typing import Any, Literal

import aio_pika
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from app.sinks.rabbitmq import broker_host

PREVIEW_BYTES = 1024


class TopologyError(ValueError):
    """The topology file is not valid; nothing was sent to the broker."""


def _name(value: str) -> str:
    if not value or len(value.encode()) > 255:
        raise ValueError("a name is 1 to 255 bytes")
    if value.startswith("amq."):
        raise ValueError("names starting with 'amq.' are reserved by the broker")
    return value


class ExchangeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    type: Literal["direct", "fanout", "topic", "headers"] = "direct"
    durable: bool = True
    auto_delete: bool = False
    arguments: dict[str, Any] = Field(default_factory=dict)

    _check_name = field_validator("name")(_name)


class QueueSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    durable: bool = True
    auto_delete: bool = False
    exclusive: bool = False
    arguments: dict[str, Any] = Field(default_factory=dict)

    _check_name = field_validator("name")(_name)


class BindingSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    exchange: str
    queue: str
    routing_key: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)

    @field_validator("routing_key")
    @classmethod
    def _short_key(cls, value: str) -> str:
        if len(value.encode()) > 255:
            raise ValueError("routing_key is longer than 255 bytes")
        return value


class Topology(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    exchanges: list[ExchangeSpec] = Field(default_factory=list)
    queues: list[QueueSpec] = Field(default_factory=list)
    bindings: list[BindingSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _bindings_refer_to_declared_names(self) -> Topology:
        exchanges = {e.name for e in self.exchanges}
        queues = {q.name for q in self.queues}
        for index, binding in enumerate(self.bindings):
            if binding.exchange not in exchanges:
                raise ValueError(
                    f"bindings[{index}]: exchange {binding.exchange!r} is not declared"
                )
            if binding.queue not in queues:
                raise ValueError(f"bindings[{index}]: queue {binding.queue!r} is not declared")
        return self


def load_topology(text: str) -> Topology:
    """Parse and validate a TOML topology; every entry is checked before any is declared."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TopologyError(f"not valid TOML: {exc}") from None
    try:
        return Topology.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "topology"
        raise TopologyError(f"{where}: {first['msg']}") from None


@dataclass(frozen=True)
class Declared:
    exchanges: int
    queues: int
    bindings: int


async def declare(url: str, topology: Topology) -> Declared:
    """Declare exchanges, then queues, then bindings (idempotent on the broker's side)."""
    connection = await aio_pika.connect(url, timeout=10)
    try:
        channel = await connection.channel()
        exchanges = {}
        for e in topology.exchanges:
            exchanges[e.name] = await channel.declare_exchange(
                e.name,
                type=e.type,
                durable=e.durable,
                auto_delete=e.auto_delete,
                arguments=e.arguments,
            )
        queues = {}
        for q in topology.queues:
            queues[q.name] = await channel.declare_queue(
                q.name,
                durable=q.durable,
                auto_delete=q.auto_delete,
                exclusive=q.exclusive,
                arguments=q.arguments,
            )
        for b in topology.bindings:
            await queues[b.queue].bind(
                exchanges[b.exchange], routing_key=b.routing_key, arguments=b.arguments
            )
    finally:
        await connection.close()
    return Declared(len(topology.exchanges), len(topology.queues), len(topology.bindings))


@dataclass(frozen=True)
class Peeked:
    message_id: str | None
    type: str | None
    routing_key: str | None
    headers: dict[str, Any]
    size: int
    body: str
    truncated: bool


async def peek(url: str, queue_name: str, count: int, *, raw: bool) -> list[Peeked]:
    """Fetch up to `count` messages and put them all back (requeued, order kept)."""
    connection = await aio_pika.connect(url, timeout=10)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name, passive=True)
        fetched = []
        for _ in range(count):
            message = await queue.get(no_ack=False, fail=False)
            if message is None:
                break
            fetched.append(message)
        result = []
        for message in fetched:
            body = message.body if raw else message.body[:PREVIEW_BYTES]
            result.append(
                Peeked(
                    message_id=message.message_id,
                    type=message.type,
                    routing_key=message.routing_key,
                    headers=dict(message.headers or {}),
                    size=len(message.body),
                    body=body.decode("utf-8", "replace"),
                    truncated=len(body) < len(message.body),
                )
            )
        for message in fetched:
            await message.nack(requeue=True)
    finally:
        await connection.close()
    return result


def describe_broker(url: str) -> str:
    return f"RabbitMQ at {broker_host(url)}"
