"""The access log: one line per request with what an operator searches by (method, path,
status, duration, client, the proxy's request id, the key's name), never a key or a query
value; probes only at DEBUG."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest

from app.telemetry.logs import JsonFormatter, TextFormatter

KEY = "0123456789abcdef-writer"
KEYS = f"deploy-bot:{KEY}"
SECRET = "s3cr3t-query-value"


def _access(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "app.access"]


def _spec() -> dict[str, Any]:
    return {
        "event_type": "test.event",
        "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"},
        "trigger": {"type": "once", "delay_seconds": 3600},
    }


async def test_a_request_is_one_line_with_its_fields_and_the_keys_name(
    make_harness: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        caplog.clear()
        response = await h.client.post(
            f"/v1/schedules?token={SECRET}",
            json=_spec(),
            headers={"Authorization": f"Bearer {KEY}", "X-Request-Id": "req-42"},
        )
        await h.client.post(
            "/v1/schedules", json=_spec(), headers={"Authorization": f"Bearer {KEY}"}
        )

    first, second = _access(caplog)
    entry = json.loads(JsonFormatter().format(first))
    assert entry["level"] == "INFO"
    assert entry["message"] == "request"
    assert {k: entry[k] for k in ("method", "path", "status", "client", "request_id")} == {
        "method": "POST",
        "path": "/v1/schedules",
        "status": response.status_code,
        "client": "127.0.0.1",
        "request_id": "req-42",
    }
    assert entry["api_key"] == "deploy-bot"
    assert isinstance(entry["duration_ms"], float)
    assert entry["duration_ms"] > 0
    assert second.status == 201  # type: ignore[attr-defined]
    for record in (first, second):
        for line in (JsonFormatter().format(record), TextFormatter().format(record)):
            assert KEY not in line
            assert SECRET not in line

    text = TextFormatter().format(second)
    assert "app.access: request method=POST path=/v1/schedules status=201 duration_ms=" in text
    assert text.endswith("client=127.0.0.1 api_key=deploy-bot")  # no request id: left out


@pytest.mark.parametrize(
    ("allow", "forwarded", "client"),
    [
        # The proxy next to the service (a trusted peer) names the client last.
        ("127.0.0.1", "203.0.113.9, 198.51.100.7", "198.51.100.7"),
        ("127.0.0.1", "2001:db8::7", "2001:db8::7"),
        # What is not an address, or comes from a peer nobody said to trust, is not believed.
        ("127.0.0.1", "198.51.100.7, not-an-address", "127.0.0.1"),
        ("10.0.0.1", "198.51.100.7", "127.0.0.1"),
    ],
    ids=["trusted", "ipv6", "garbage", "untrusted"],
)
async def test_behind_a_trusted_proxy_the_client_is_the_one_it_forwards(
    make_harness: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
    allow: str,
    forwarded: str,
    client: str,
) -> None:
    async with make_harness(forwarded_allow_ips=allow) as h:
        caplog.clear()
        await h.client.get("/v1/schedules", headers={"X-Forwarded-For": forwarded})

    (record,) = _access(caplog)
    assert record.client == client  # type: ignore[attr-defined]


async def test_a_refused_request_is_logged_without_a_key_name(
    make_harness: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        caplog.clear()
        wrong = await h.client.get("/v1/schedules", headers={"Authorization": "Bearer nope" * 3})
        assert wrong.status_code == 401

    (record,) = _access(caplog)
    entry = json.loads(JsonFormatter().format(record))
    assert (entry["status"], entry["api_key"], entry["path"]) == (401, None, "/v1/schedules")


async def test_a_request_id_that_is_not_one_printable_word_is_not_repeated(
    make_harness: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with make_harness() as h:
        caplog.clear()
        await h.client.get("/v1/schedules", headers={"X-Request-Id": "a b"})
        await h.client.get("/v1/schedules", headers={"X-Request-Id": "x" * 129})
        await h.client.get("/v1/schedules", headers={"X-Request-Id": "x" * 128})

    assert [r.request_id for r in _access(caplog)] == [None, None, "x" * 128]  # type: ignore[attr-defined]


async def test_probes_are_logged_at_debug_only(
    make_harness: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with make_harness() as h:
        caplog.clear()
        for path in ("/healthz", "/readyz", "/metrics", "/v1/schedules"):
            await h.client.get(path)
        at_info = [r.path for r in _access(caplog)]  # type: ignore[attr-defined]
    async with make_harness(log_level="DEBUG") as h:
        caplog.clear()
        await h.client.get("/healthz")
        at_debug = [(r.levelname, r.path) for r in _access(caplog)]  # type: ignore[attr-defined]

    assert at_info == ["/v1/schedules"]
    assert at_debug == [("DEBUG", "/healthz")]


async def test_the_access_log_can_be_turned_off(
    make_harness: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with make_harness(access_log=False) as h:
        caplog.clear()
        await h.client.get("/v1/schedules")

    assert _access(caplog) == []
