"""Webhook responses mapped to outcomes, Retry-After parsing, delivery headers (DESIGN 5)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.occurrence import Delivered, Delivery, Permanent, Retryable
from app.domain.target import WebhookTarget
from app.sinks.webhook import WebhookSink, outcome_for_status, parse_retry_after
from tests import factories

NOW = datetime(2024, 3, 5, 10, 30, tzinfo=UTC)


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_a_2xx_status_is_delivered(status: int) -> None:
    assert outcome_for_status(status, None, b"") == Delivered(status)


@pytest.mark.parametrize(
    "status", [100, 300, 301, 302, 303, 304, 307, 308, 400, 401, 403, 404, 409, 410, 422]
)
def test_other_statuses_fail_permanently(status: int) -> None:
    outcome = outcome_for_status(status, None, b"nope")

    assert isinstance(outcome, Permanent)
    assert outcome.error == f"HTTP {status}: nope"


@pytest.mark.parametrize("status", [408, 429, 500, 501, 502, 503, 504, 599])
def test_timeouts_throttling_and_server_errors_are_retryable(status: int) -> None:
    outcome = outcome_for_status(status, None, b"busy")

    assert isinstance(outcome, Retryable)
    assert outcome.error == f"HTTP {status}: busy"
    assert outcome.retry_after is None


def test_the_error_without_a_body_excerpt_is_just_the_status() -> None:
    assert outcome_for_status(503, None, b"") == Retryable("HTTP 503", None, 503)


@pytest.mark.parametrize(("status", "header"), [(429, "120"), (503, "120"), (408, " 120 ")])
def test_a_retryable_status_carries_the_retry_after_seconds(status: int, header: str) -> None:
    outcome = outcome_for_status(status, header, b"")

    assert isinstance(outcome, Retryable)
    assert outcome.retry_after == 120.0


def test_a_retry_after_http_date_becomes_seconds_from_now() -> None:
    later = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=10)

    outcome = outcome_for_status(429, format_datetime(later, usegmt=True), b"")

    assert isinstance(outcome, Retryable)
    assert outcome.retry_after is not None
    assert 595.0 <= outcome.retry_after <= 600.0


@pytest.mark.parametrize("header", ["soon", "\u00b2"])
def test_a_retryable_status_with_a_garbage_retry_after_stays_retryable(header: str) -> None:
    assert outcome_for_status(503, header, b"") == Retryable("HTTP 503", None, 503)


def test_the_reply_keeps_its_status_and_the_first_kibibyte_of_its_body_as_text() -> None:
    body = b"\xff" + b"x" * 2000

    outcome = outcome_for_status(503, None, body)

    assert isinstance(outcome, Retryable)
    assert outcome.status_code == 503
    assert outcome.response_excerpt == "\ufffd" + "x" * 1023
    assert outcome.error == "HTTP 503: \ufffd" + "x" * 255


def test_a_permanent_status_ignores_retry_after() -> None:
    assert outcome_for_status(404, "30", b"") == Permanent("HTTP 404", 404)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("0", 0.0),
        ("1", 1.0),
        ("120", 120.0),
        ("  45\t", 45.0),
        ("86400", 86400.0),
        ("Tue, 05 Mar 2024 10:32:00 GMT", 120.0),
        ("Tue, 05 Mar 2024 12:32:00 +0200", 120.0),
        ("Tue, 05 Mar 2024 10:32:00 -0000", 120.0),
        ("Tuesday, 05-Mar-24 10:31:00 GMT", 60.0),  # the obsolete RFC 850 form
        ("Tue, 05 Mar 2024 10:00:00 GMT", 0.0),  # in the past: retry at once
    ],
)
def test_retry_after_is_parsed_as_seconds_or_an_http_date(
    header: str, seconds: float | None
) -> None:
    assert parse_retry_after(header, NOW) == seconds


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "   ",
        "soon",
        "-5",
        "+5",
        "1.5",
        "1e3",
        "12 seconds",
        "Tue, 32 Mar 2024 10:32:00 GMT",
        "\u00b2",  # SUPERSCRIPT TWO: str.isdigit() says yes, float() says no
    ],
)
def test_a_garbage_retry_after_is_ignored(header: str | None) -> None:
    assert parse_retry_after(header, NOW) is None


@given(st.text(max_size=40))
def test_parsing_any_retry_after_never_raises(header: str) -> None:
    seconds = parse_retry_after(header, NOW)

    assert seconds is None or seconds >= 0.0


@given(st.integers(min_value=0, max_value=10**9))
def test_any_delta_seconds_retry_after_is_read_exactly(seconds: int) -> None:
    assert parse_retry_after(str(seconds), NOW) == float(seconds)


def make_delivery(**overrides: Any) -> Delivery:
    target = WebhookTarget(
        type="webhook", url="http://127.0.0.1:9/hook", headers={"Authorization": "Bearer t"}
    )
    defaults: dict[str, Any] = {"attempt": 3, "target": target, "one_shot": False}
    return factories.make_delivery(**{**defaults, **overrides})


def test_every_delivery_carries_the_contract_headers() -> None:
    delivery = make_delivery()
    assert isinstance(delivery.target, WebhookTarget)

    headers = WebhookSink(concurrency=1, max_timeout=10).headers(delivery, delivery.target)

    assert headers == {
        "Authorization": "Bearer t",
        "Content-Type": "application/json",
        "X-Occurrence-Id": "6f1d2c3b-4a59-5e8f-9d0c-1b2a3c4d5e6f",
        "X-Schedule-Id": "01900000-0000-7000-8000-000000000001",
        "X-Event-Type": "invoice.due",
        "X-Chronoq-Tenant": "default",
        "X-Scheduled-For": "2024-03-05T10:30:00.000000Z",
        "X-Attempt": "3",
        "Idempotency-Key": "6f1d2c3b-4a59-5e8f-9d0c-1b2a3c4d5e6f",
    }


def test_a_deliverys_traceparent_replaces_one_the_target_sets_in_any_case() -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    target = WebhookTarget(
        type="webhook", url="http://127.0.0.1:9/hook", headers={"TraceParent": "its own"}
    )
    sink = WebhookSink(concurrency=1, max_timeout=10)

    traced = sink.headers(make_delivery(target=target, traceparent=traceparent), target)
    untraced = sink.headers(make_delivery(target=target), target)

    assert [(k, v) for k, v in traced.items() if k.lower() == "traceparent"] == [
        ("traceparent", traceparent)
    ]
    assert [(k, v) for k, v in untraced.items() if k.lower() == "traceparent"] == [
        ("TraceParent", "its own")
    ]


async def _deliver_once(target: WebhookTarget) -> Any:
    """One delivery to `target` through a sink of its own."""
    sink = WebhookSink(concurrency=1, max_timeout=2)
    await sink.open()
    try:
        return await sink.deliver(factories.make_delivery(target=target))
    finally:
        await sink.close()


@pytest.mark.parametrize(
    "url",
    [
        # Stored before hosts were checked at create: aiohttp refuses them, naming the URL.
        "http://ops:hunter2secret@a\u200bb.example/hook?token=t0psecret",
        "http://ops:hunter2secret@exa\u00admple.com/hook?token=t0psecret",
    ],
)
async def test_a_stored_url_the_client_refuses_fails_at_once_without_its_credentials(
    url: str,
) -> None:
    # Read back as stored (no input rules): what the loop has for an old row.
    target = WebhookTarget.model_validate({"type": "webhook", "url": url}, context={"stored": True})
    outcome = await _deliver_once(target)

    # It can never be sent: a dead letter at once, not a retry storm.
    assert isinstance(outcome, Permanent)
    assert "hunter2secret" not in outcome.error
    assert "t0psecret" not in outcome.error


async def test_a_stored_url_with_userinfo_and_an_authorization_header_fails_at_once() -> None:
    target = WebhookTarget.model_validate(
        {
            "type": "webhook",
            "url": "http://ops:hunter2secret@127.0.0.1:9/hook",
            "headers": {"Authorization": "Bearer x"},
        },
        context={"stored": True},
    )
    outcome = await _deliver_once(target)

    assert isinstance(outcome, Permanent)
    assert "hunter2secret" not in outcome.error
