"""The rabbitmq target against the real broker: what arrives, and how failures settle."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

import aio_pika
import pytest

from tests.integration.conftest import Harness
from tests.waiting import eventually

pytestmark = pytest.mark.rabbitmq


def rabbitmq(routing_key: str, exchange: str = "", **extra: Any) -> dict[str, Any]:
    return {"type": "rabbitmq", "exchange": exchange, "routing_key": routing_key, **extra}


async def _get(
    queue: aio_pika.abc.AbstractQueue, timeout: float = 10.0
) -> aio_pika.abc.AbstractIncomingMessage:
    found: list[aio_pika.abc.AbstractIncomingMessage] = []

    async def arrived() -> bool:
        message = await queue.get(no_ack=True, fail=False)
        if message is not None:
            found.append(message)
        return bool(found)

    await eventually(arrived, within=timeout, every=0.05, what="a message")
    return found[0]


async def test_an_occurrence_is_published_with_the_contract_properties_and_headers(
    amqp_harness: Harness, queue: aio_pika.abc.AbstractQueue
) -> None:
    created = await amqp_harness.create(
        event_type="invoice.due",
        payload={"invoice": 7},
        target=rabbitmq(queue.name, headers={"tenant": "acme", "priority": 3}),
    )

    assert await amqp_harness.step() == 1

    message = await _get(queue)
    assert message.body == b'{"invoice":7}'
    assert message.message_id == created["next_occurrence_id"]
    assert message.type == "invoice.due"
    assert message.content_type == "application/json"
    assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    assert message.timestamp is not None
    headers = message.headers
    assert headers["x-schedule-id"] == created["id"]
    assert headers["x-scheduled-for"] == created["next_fire_at"]
    assert headers["x-attempt"] == 1
    assert headers["x-chronoq-tenant"] == "default"  # its schedule's tenant
    assert headers["tenant"] == "acme"  # a header of the target's own
    assert headers["priority"] == 3
    assert await amqp_harness.schedule_status(created["id"]) == "completed"


async def test_a_create_requests_traceparent_is_a_header_of_every_message(
    amqp_harness: Harness, queue: aio_pika.abc.AbstractQueue
) -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    body = {
        "event_type": "invoice.due",
        "payload": {"invoice": 7},
        "trigger": {"type": "immediate"},
        "target": rabbitmq(queue.name, headers={"traceparent": "the target's own"}),
    }
    response = await amqp_harness.client.post(
        "/v1/schedules", json=body, headers={"traceparent": traceparent}
    )
    assert response.status_code == 201, response.text

    assert await amqp_harness.step() == 1

    message = await _get(queue)
    assert message.headers["traceparent"] == traceparent


async def test_an_unroutable_publish_is_a_failed_attempt_that_is_retried(
    amqp_harness: Harness, broker: aio_pika.abc.AbstractChannel
) -> None:
    name = f"chronoq-test-late-{uuid.uuid4().hex[:12]}"
    created = await amqp_harness.create(target=rabbitmq(name))

    await amqp_harness.step()

    (occurrence,) = await amqp_harness.occurrences(created["id"])
    assert occurrence["status"] == "pending"
    assert "NO_ROUTE" in occurrence["last_error"]

    queue = await broker.declare_queue(name)
    try:
        await amqp_harness.step_until(lambda: _status(amqp_harness, created["id"], "completed"))
        message = await _get(queue)
        assert cast(int, message.headers["x-attempt"]) >= 2
    finally:
        await queue.delete(if_unused=False, if_empty=False)


async def test_a_missing_exchange_fails_only_its_own_delivery(
    amqp_harness: Harness, queue: aio_pika.abc.AbstractQueue
) -> None:
    missing = await amqp_harness.create(
        target=rabbitmq("anything", exchange=f"chronoq-missing-{uuid.uuid4().hex[:8]}")
    )
    fine = [await amqp_harness.create(target=rabbitmq(queue.name)) for _ in range(3)]

    assert await amqp_harness.step() == 4

    (occurrence,) = await amqp_harness.occurrences(missing["id"])
    assert occurrence["status"] == "pending"
    assert "channel error" in occurrence["last_error"]
    assert "NOT_FOUND" in occurrence["last_error"]
    for schedule in fine:
        assert await amqp_harness.schedule_status(schedule["id"]) == "completed"
    received = {(await _get(queue)).message_id for _ in range(3)}
    assert received == {s["next_occurrence_id"] for s in fine}


async def test_readyz_reports_the_broker(amqp_harness: Harness) -> None:
    # The broker connection is made in the background (a replica starts while the broker is
    # down): the replica is ready once it is up, which a loaded machine can take a moment.
    async def ready() -> bool:
        response = await amqp_harness.client.get("/readyz")
        return response.status_code == 200 and response.json()["checks"]["broker"] == "ok"

    await eventually(ready, within=10.0, what="/readyz 200 with the broker ok")


async def test_a_broker_that_cannot_be_reached_is_a_retried_attempt_and_the_api_still_works(
    make_harness: Callable[..., Any],
) -> None:
    unreachable = "amqp://guest:secret@127.0.0.1:9/"
    async with make_harness(amqp_url=unreachable) as harness:
        created = await harness.create(target=rabbitmq("jobs"))

        await harness.step()

        (occurrence,) = await harness.occurrences(created["id"])
        assert occurrence["status"] == "pending"
        assert "unreachable" in occurrence["last_error"]
        assert "secret" not in occurrence["last_error"]
        ready = await harness.client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["broker"] == "unreachable"
        assert "secret" not in ready.text


async def _status(harness: Harness, schedule_id: str, status: str) -> bool:
    return await harness.schedule_status(schedule_id) == status


async def test_a_publish_to_a_hung_broker_gives_up_at_the_dispatch_timeout(
    make_harness: Callable[..., Any],
    amqp_url: str,
) -> None:
    from urllib.parse import urlsplit

    from tests.tcp_proxy import TcpProxy

    parts = urlsplit(amqp_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5672)
    await proxy.start()
    proxied = parts._replace(netloc=f"{parts.username}:{parts.password}@127.0.0.1:{proxy.port}")
    try:
        async with make_harness(amqp_url=proxied.geturl(), dispatch_timeout=0.5) as harness:
            broker = harness.sinks.broker
            await eventually(
                lambda: bool(broker and broker.connected),
                within=15,
                every=0.05,
                what="the sink connected",
            )
            created = await harness.create(target=rabbitmq("jobs"))
            proxy.stall()

            # The broker never answers: only the dispatch timeout (0.5 s) ends the attempt.
            # The bound is generous, and a publish that waited on the stalled broker would
            # overrun it by far.
            async with asyncio.timeout(30):
                await harness.step()

            (occurrence,) = await harness.occurrences(created["id"])
            assert occurrence["status"] == "pending"
            assert "timed out" in occurrence["last_error"]
            (attempt,) = (
                await harness.get(f"/v1/occurrences/{occurrence['occurrence_id']}/attempts")
            )["items"]
            assert attempt["duration_ms"] >= 500, "ended by the dispatch timeout, not sooner"
            proxy.flow()
    finally:
        await proxy.close()


async def test_a_nacked_publish_is_a_failed_attempt_that_is_retried(
    amqp_harness: Harness, broker: aio_pika.abc.AbstractChannel
) -> None:
    full = await broker.declare_queue(
        f"chronoq-test-full-{uuid.uuid4().hex[:10]}",
        arguments={"x-max-length": 0, "x-overflow": "reject-publish"},
    )
    try:
        created = await amqp_harness.create(target=rabbitmq(full.name))

        await amqp_harness.step()

        (occurrence,) = await amqp_harness.occurrences(created["id"])
        assert occurrence["status"] == "pending"
        assert "nack" in occurrence["last_error"]
    finally:
        await full.delete(if_unused=False, if_empty=False)


@pytest.mark.parametrize(
    ("target", "pointer"),
    [
        pytest.param(rabbitmq(""), "#/target", id="empty routing key on the default exchange"),
        pytest.param(rabbitmq("k" * 256), "#/target", id="routing key over 255 bytes"),
        pytest.param(rabbitmq("é" * 128), "#/target", id="routing key over 255 bytes in UTF-8"),
        pytest.param(
            rabbitmq("jobs", headers={"nested": {"a": 1}}),
            "#/target/headers/nested",
            id="a header value that is not a JSON scalar",
        ),
        pytest.param(rabbitmq("jobs", exchange="x" * 256), "#/target/exchange", id="long exchange"),
    ],
)
async def test_an_invalid_rabbitmq_target_is_refused_and_nothing_is_stored(
    make_harness: Callable[..., Any],
    target: dict[str, Any],
    pointer: str,
) -> None:
    async with make_harness(amqp_url="amqp://guest:guest@127.0.0.1:9/") as harness:
        response = await harness.client.post(
            "/v1/schedules",
            json={"event_type": "x", "target": target, "trigger": {"type": "immediate"}},
        )

        assert response.status_code == 422, response.text
        pointers = [e["pointer"] for e in response.json()["errors"]]
        assert any(p.startswith(pointer) for p in pointers), pointers
        assert (await harness.get("/v1/schedules"))["items"] == []


async def test_a_close_as_the_connect_completes_ends_the_sink_and_its_connection(
    amqp_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python 3.11's wait_for, under aio-pika's connect, returns the connection rather than
    raise a cancel that lands as the connect completes: the sink's close must end all the
    same, leaving no connection open, instead of waiting on a task that goes on."""
    from app.sinks import rabbitmq as module

    real_connect = aio_pika.connect
    opened: list[aio_pika.abc.AbstractConnection] = []
    connecting = asyncio.Event()

    async def connect_losing_the_cancel(*args: Any, **kwargs: Any) -> Any:
        attempt = asyncio.ensure_future(real_connect(*args, **kwargs))
        connecting.set()
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            connection = await attempt  # what wait_for does when both happen at once
            opened.append(connection)
            return connection

    monkeypatch.setattr(aio_pika, "connect", connect_losing_the_cancel)
    sink = module.RabbitMQSink(amqp_url, concurrency=4)
    await sink.open()
    await connecting.wait()
    started = time.monotonic()
    await asyncio.wait_for(sink.close(), 30)

    assert time.monotonic() - started < 10

    assert len(opened) == 1
    assert opened[0].is_closed
    assert not sink.connected
