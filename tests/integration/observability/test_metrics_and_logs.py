"""GET /metrics and the log lines of deliveries: what an operator's dashboards and log
search see, and what they must never see (payloads, secrets)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.telemetry.logs import JsonFormatter
from tests.integration.conftest import Harness
from tests.receiver import Reply

SECRET = "s3cr3t-token-value"
PAYLOAD_MARK = "payload-only-text"


async def _samples(harness: Harness) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = await harness.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    values = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def _value(samples: dict, name: str, **labels: str) -> float:  # type: ignore[type-arg]
    return float(samples.get((name, tuple(sorted(labels.items()))), 0.0))


async def test_metrics_count_claims_deliveries_lateness_and_dead_letters(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(max_attempts=1) as harness:
        before = await _samples(harness)
        harness.receiver.script("/hook", Reply(), Reply(), Reply(status=410))
        for _ in range(3):
            await harness.create(trigger={"type": "immediate"})
        await harness.step()

        after = await _samples(harness)

    def grew(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert grew("chronoq_occurrences_claimed_total") == 3
    attempts = "chronoq_delivery_attempts_total"
    assert grew(attempts, outcome="delivered", target_type="webhook", reason="none") == 2
    assert grew(attempts, outcome="dead_lettered", target_type="webhook", reason="4xx") == 1
    assert grew("chronoq_occurrences_delivered_total", target_type="webhook") == 2
    assert grew("chronoq_occurrences_dead_lettered_total", target_type="webhook", reason="4xx") == 1
    # The names of the previous release, kept for its dashboards until the next one.
    assert grew("chronoq_deliveries_total", outcome="delivered", target_type="webhook") == 2
    assert grew("chronoq_deliveries_total", outcome="dead_lettered", target_type="webhook") == 1
    assert grew("chronoq_dead_letters_total") == 1
    assert (
        grew("chronoq_delivery_lateness_seconds_count", origin="schedule", target_type="webhook")
        == 2
    )
    assert grew("chronoq_delivery_duration_seconds_count", target_type="webhook") == 3
    assert _value(after, "chronoq_deliveries_in_flight") == 0
    assert ("chronoq_db_pool_in_use", (("pool", "api"),)) in after
    assert ("chronoq_db_pool_size", (("pool", "api"),)) in after


async def test_the_running_loop_counts_its_cycles(harness: Harness) -> None:
    import random

    from app.worker.dispatcher import Dispatcher

    before = await _samples(harness)
    dispatcher = Dispatcher(harness.database, harness.sinks, harness.settings, rng=random.Random(2))
    async with dispatcher.started():
        await harness.create(trigger={"type": "immediate"})
        await harness.receiver.wait_for(1)
    after = await _samples(harness)

    cycles = _value(after, "chronoq_loop_cycles_total") - _value(
        before, "chronoq_loop_cycles_total"
    )
    assert cycles >= 1
    assert "chronoq_loop_errors_total" in {name for name, _ in after}


async def test_delivery_log_lines_carry_ids_and_outcome_but_no_payload_or_secret(
    make_harness: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with make_harness(max_attempts=2) as harness:
        # The target echoes the payload in its error reply, and its URL holds a token.
        echo = json.dumps({"echo": PAYLOAD_MARK, "token": SECRET})
        harness.receiver.script("/hook", Reply(status=503, body=echo), Reply(status=422, body=echo))
        created = await harness.create(
            payload={"note": PAYLOAD_MARK},
            target=harness.webhook(f"/hook?token={SECRET}", headers={"Authorization": SECRET}),
        )
        with caplog.at_level(logging.DEBUG, logger="app"):
            await harness.step_until(lambda: _dead(harness))

    formatter = JsonFormatter()
    lines = [formatter.format(record) for record in caplog.records]
    events = [json.loads(line) for line in lines if created["next_occurrence_id"] in line]
    assert [e["outcome"] for e in events] == ["retry", "dead_lettered"]
    for event in events:
        assert event["schedule_id"] == created["id"]
        assert event["occurrence_id"] == created["next_occurrence_id"]
    assert [e["attempt"] for e in events] == [1, 2]
    assert events[0]["reason"] == "HTTP 503"
    for line in lines:
        assert SECRET not in line
        assert PAYLOAD_MARK not in line


async def _dead(harness: Harness) -> bool:
    return bool((await harness.get("/v1/dead-letters"))["items"])


async def test_each_attempt_counts_with_its_failure_reason_and_the_delivery_once(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(max_attempts=3) as harness:
        before = await _samples(harness)
        harness.receiver.script("/hook", Reply(status=503), Reply(status=429), Reply())
        created = await harness.create(trigger={"type": "immediate"})

        async def delivered() -> bool:
            [occurrence] = await harness.occurrences(created["id"])
            return bool(occurrence["status"] == "delivered")

        await harness.step_until(delivered)
        after = await _samples(harness)

    def grew(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    attempts = "chronoq_delivery_attempts_total"
    assert grew(attempts, outcome="retry", target_type="webhook", reason="5xx") == 1
    assert grew(attempts, outcome="retry", target_type="webhook", reason="429") == 1
    assert grew(attempts, outcome="delivered", target_type="webhook", reason="none") == 1
    assert grew("chronoq_occurrences_delivered_total", target_type="webhook") == 1
    assert grew("chronoq_deliveries_total", outcome="retry", target_type="webhook") == 2


async def test_a_target_that_refuses_connections_or_times_out_is_counted_by_that_reason(
    make_harness: Callable[..., Any], unused_tcp_port: int
) -> None:
    async with make_harness(max_attempts=1) as harness:
        before = await _samples(harness)
        harness.receiver.script("/slow", Reply(delay=2.0))
        closed = {"type": "webhook", "url": f"http://127.0.0.1:{unused_tcp_port}/hook"}
        await harness.create(target=closed)
        await harness.create(target=harness.webhook("/slow", timeout_seconds=0.2))
        await harness.step()
        after = await _samples(harness)

    def dead(reason: str) -> float:
        name, labels = "chronoq_occurrences_dead_lettered_total", {"target_type": "webhook"}
        return _value(after, name, **labels, reason=reason) - _value(
            before, name, **labels, reason=reason
        )

    assert (dead("connect"), dead("timeout")) == (1, 1)
