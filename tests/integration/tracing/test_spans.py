"""Traces on: a server span per API request, a span per claim and per delivery attempt, the
create request's trace continued by its schedule's deliveries and named in their attempt
records and log lines."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import aio_pika
import pytest
import sqlalchemy as sa
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from sqlalchemy.ext.asyncio import AsyncConnection

from tests.integration.conftest import Harness
from tests.receiver import Reply
from tests.waiting import eventually

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
INCOMING = f"00-{TRACE}-{PARENT}-01"


def named(spans: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name.startswith(prefix)]


def create_claim_deliver(
    spans: InMemorySpanExporter,
) -> tuple[ReadableSpan, ReadableSpan, ReadableSpan]:
    """The one create request's server span, the one claim's and the one attempt's."""
    (server,) = [
        s
        for s in spans.get_finished_spans()
        if s.kind is SpanKind.SERVER and (s.attributes or {}).get("http.request.method") == "POST"
    ]
    (claim,) = named(spans, "chronoq claim")
    (deliver,) = named(spans, "chronoq deliver")
    return server, claim, deliver


def ids(span: ReadableSpan) -> tuple[str, str]:
    """A span's (trace id, span id) in hex."""
    context = span.get_span_context()
    assert context is not None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def parent_of(span: ReadableSpan) -> str | None:
    return None if span.parent is None else f"{span.parent.span_id:016x}"


async def create(harness: Harness, headers: dict[str, str], **spec: Any) -> dict[str, Any]:
    body = {"event_type": "test.event", "payload": {"n": 1}, "trigger": {"type": "immediate"}}
    body["target"] = harness.webhook()
    response = await harness.client.post("/v1/schedules", json={**body, **spec}, headers=headers)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def test_an_api_request_is_a_server_span_that_joins_the_callers_trace(
    traced_harness: Callable[..., Any], spans: InMemorySpanExporter
) -> None:
    async with traced_harness() as harness:
        response = await harness.client.get("/v1/schedules", headers={"traceparent": INCOMING})
        assert response.status_code == 200
        untraced = await harness.client.get("/healthz")
        assert untraced.status_code == 200

    (span,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.SERVER]
    attributes = dict(span.attributes or {})
    assert attributes["http.request.method"] == "GET"
    assert attributes["http.route"] == "/v1/schedules"
    assert attributes["http.response.status_code"] == 200
    assert ids(span)[0] == TRACE
    assert parent_of(span) == PARENT


async def test_a_delivery_continues_the_trace_of_the_request_that_created_it(
    traced_harness: Callable[..., Any], spans: InMemorySpanExporter
) -> None:
    async with traced_harness() as harness:
        created = await create(harness, {"traceparent": INCOMING})
        assert await harness.step() == 1
        (request,) = harness.receiver.requests
        attempts = await harness.get(f"/v1/occurrences/{created['next_occurrence_id']}/attempts")

    server, claim, deliver = create_claim_deliver(spans)
    # The delivery is the create request's grandchild: the caller's span, the server's, its own.
    assert ids(server)[0] == ids(deliver)[0] == TRACE
    assert parent_of(deliver) == ids(server)[1]
    assert deliver.kind is SpanKind.CLIENT
    assert dict(deliver.attributes or {}) == {
        "chronoq.occurrence.id": created["next_occurrence_id"],
        "chronoq.schedule.id": created["id"],
        "chronoq.attempt": 1,
        "chronoq.target.type": "webhook",
        "chronoq.outcome": "delivered",
        "http.response.status_code": 200,
    }
    # The receiver's own spans would be the delivery span's children.
    assert request.headers["traceparent"] == f"00-{TRACE}-{ids(deliver)[1]}-01"
    # The claim is a trace of its own, which links to the trace its row was created in.
    assert ids(claim)[0] != TRACE
    assert [f"{link.context.trace_id:032x}" for link in claim.links] == [TRACE]
    assert dict(claim.attributes or {}) == {"chronoq.claim.limit": 100, "chronoq.claim.size": 1}
    (attempt,) = attempts["items"]
    assert attempt["trace_id"] == TRACE


async def test_a_garbage_traceparent_is_ignored_and_the_server_span_starts_the_trace(
    traced_harness: Callable[..., Any], spans: InMemorySpanExporter
) -> None:
    async with traced_harness() as harness:
        # Garbage is no trace context: the server span starts a trace of its own.
        created = await create(harness, {"traceparent": "00-garbage"})
        assert await harness.step() == 1
        (request,) = harness.receiver.requests
        attempts = await harness.get(f"/v1/occurrences/{created['next_occurrence_id']}/attempts")

    server, claim, deliver = create_claim_deliver(spans)
    assert server.parent is None
    # Stored with the schedule: the server span's own context.
    assert ids(deliver)[0] == ids(server)[0]
    assert request.headers["traceparent"].split("-")[1:3] == list(ids(deliver))
    assert attempts["items"][0]["trace_id"] == ids(server)[0]
    assert [f"{link.context.trace_id:032x}" for link in claim.links] == [ids(server)[0]]


async def test_a_claim_that_leases_nothing_makes_no_span(
    traced_harness: Callable[..., Any], spans: InMemorySpanExporter
) -> None:
    async with traced_harness() as harness:
        assert await harness.step() == 0
        await create(harness, {})
        assert await harness.step() == 1

    assert len(named(spans, "chronoq claim")) == 1


async def test_a_schedule_stored_without_trace_context_is_delivered_in_the_claims_trace(
    traced_harness: Callable[..., Any], spans: InMemorySpanExporter
) -> None:
    async with traced_harness() as harness:
        await create(harness, {})

        async def forget(conn: AsyncConnection) -> None:  # as stored before traces were on
            await conn.execute(sa.text("UPDATE schedules SET traceparent = NULL"))

        await harness.database.run(forget)
        assert await harness.step() == 1
        (request,) = harness.receiver.requests

    (claim,) = named(spans, "chronoq claim")
    (deliver,) = named(spans, "chronoq deliver")
    assert parent_of(deliver) == ids(claim)[1]
    assert ids(deliver)[0] == ids(claim)[0]
    assert claim.links == ()
    assert request.headers["traceparent"].split("-")[1:3] == list(ids(deliver))


async def test_an_api_request_without_trace_context_stores_its_server_spans(
    traced_harness: Callable[..., Any], spans: InMemorySpanExporter
) -> None:
    async with traced_harness() as harness:
        await create(harness, {})
        assert await harness.step() == 1
        (request,) = harness.receiver.requests

    (server,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.SERVER]
    (deliver,) = named(spans, "chronoq deliver")
    assert parent_of(deliver) == ids(server)[1]
    assert request.headers["traceparent"].split("-")[1] == ids(server)[0]


async def test_a_failed_attempts_span_and_log_line_carry_its_trace(
    traced_harness: Callable[..., Any],
    spans: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with traced_harness() as harness:
        harness.receiver.script("/hook", Reply(status=503))
        await create(harness, {"traceparent": INCOMING})
        with caplog.at_level(logging.INFO, logger="app.worker.dispatcher"):
            assert await harness.step() == 1

    (deliver,) = named(spans, "chronoq deliver")
    attributes = dict(deliver.attributes or {})
    assert (attributes["chronoq.outcome"], attributes["http.response.status_code"]) == (
        "retry",
        503,
    )
    assert attributes["error.type"] == "5xx"
    (line,) = [r for r in caplog.records if "failed attempt" in r.getMessage()]
    assert getattr(line, "trace_id", None) == TRACE


@pytest.mark.rabbitmq
async def test_a_rabbitmq_message_carries_its_attempt_spans_traceparent(
    traced_harness: Callable[..., Any], spans: InMemorySpanExporter, amqp_url: str
) -> None:
    connection = await aio_pika.connect(amqp_url)
    channel = await connection.channel()
    queue = await channel.declare_queue(f"chronoq-test-{uuid.uuid4().hex[:12]}", durable=True)
    try:
        async with traced_harness(amqp_url=amqp_url) as harness:
            broker = harness.sinks.broker
            await eventually(
                lambda: broker is not None and broker.connected, what="the broker sink"
            )
            target = {"type": "rabbitmq", "exchange": "", "routing_key": queue.name}
            await create(harness, {"traceparent": INCOMING}, target=target)
            assert await harness.step() == 1
        message = await queue.get(no_ack=True, timeout=10)
    finally:
        await queue.delete(if_unused=False, if_empty=False)
        await connection.close()

    (deliver,) = named(spans, "chronoq deliver")
    assert deliver.name == "chronoq deliver rabbitmq"
    assert ids(deliver)[0] == TRACE
    assert message.headers["traceparent"] == f"00-{TRACE}-{ids(deliver)[1]}-01"


WRITE_KEY = "write-key-0123456789abcdef"


async def test_a_server_spans_query_shows_no_secret_as_answers_and_logs_do_not(
    traced_harness: Callable[..., Any], spans: InMemorySpanExporter
) -> None:
    secrets = {
        "api_key": WRITE_KEY,
        "token": "tok-1",
        "password": "pw-2",
        "access_token": "at-3",
        "secret": "sec-4",
        "sig": "sig-5",
        "code": "code-6",
        "q": WRITE_KEY,  # a key under a name that says nothing
    }
    async with traced_harness(api_keys=f"writer:{WRITE_KEY}") as harness:
        query = "&".join(f"{name}={value}" for name, value in secrets.items())
        response = await harness.client.get(f"/v1/schedules?{query}&page=2")
        assert response.status_code == 401

    (span,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.SERVER]
    attributes = dict(span.attributes or {})
    assert attributes["url.query"] == "&".join(f"{name}=***" for name in secrets) + "&page=2"
    exported = repr(attributes) + repr([event.attributes for event in span.events])
    for value in secrets.values():
        assert value not in exported
