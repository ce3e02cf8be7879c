"""`chronoq serve` with traces on (the console exporter), on PostgreSQL: the API process
exports the create request's server span, the delivery process (a process of its own) the
claim and the attempt, and the receiver gets a traceparent of the creator's trace."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.e2e.processes import Services
from tests.receiver import Receiver
from tests.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING = f"00-{TRACE}-00f067aa0ba902b7-01"


def exported(log: str) -> list[dict[str, Any]]:
    """The spans the console exporter wrote (each a JSON object over several lines)."""
    spans: list[dict[str, Any]] = []
    decoder = json.JSONDecoder()
    at = log.find("{")
    while at != -1:
        try:
            found, end = decoder.raw_decode(log, at)
        except ValueError:
            at = log.find("{", at + 1)
            continue
        if isinstance(found, dict) and "context" in found and "name" in found:
            spans.append(found)
        at = log.find("{", end)
    return spans


async def test_spans_of_the_api_and_the_delivery_process_join_the_creators_trace(
    postgres_url: str, receiver: Receiver, services: Services
) -> None:
    service = await services.start(
        "traced",
        {
            "DATABASE_URL": postgres_url,
            "CHRONOQ_POLL_INTERVAL": "0.5",
            "OTEL_TRACES_EXPORTER": "console",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        },
    )
    async with httpx.AsyncClient(base_url=service.base_url, trust_env=False) as client:
        body = {
            "event_type": "e2e.tracing",
            "payload": {"n": 1},
            "target": {"type": "webhook", "url": receiver.url("/hook")},
            "trigger": {"type": "immediate"},
        }
        answer = await client.post("/v1/schedules", json=body, headers={"traceparent": INCOMING})
        assert answer.status_code == 201, answer.text
        (request,) = await receiver.wait_for(1, path="/hook", timeout=30)

    assert request.headers["traceparent"].split("-")[1] == TRACE

    def names() -> set[str]:
        return {
            span["name"]
            for span in exported(service.log_tail(lines=100_000))
            if span["context"]["trace_id"] == f"0x{TRACE}"
        }

    await eventually(
        lambda: {"POST /v1/schedules", "chronoq deliver webhook"} <= names(), within=15
    )
    spans = exported(service.log_tail(lines=100_000))
    assert any(span["name"] == "chronoq claim" for span in spans)
    (deliver,) = [s for s in spans if s["name"] == "chronoq deliver webhook"]
    assert request.headers["traceparent"].split("-")[2] == deliver["context"]["span_id"][2:]
    assert deliver["attributes"]["chronoq.outcome"] == "delivered"
