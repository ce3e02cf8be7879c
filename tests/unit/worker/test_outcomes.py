"""What a finished attempt shows: its metrics, and a log line with ids but no payload."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY

from app.domain.occurrence import OccurrenceStatus, Settlement
from app.worker.outcomes import observe, reason
from tests import factories

SECRET = "https://example.test/hook?token=s3cret"


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def settlement(status: OccurrenceStatus, error: str | None = None, **fields: object) -> Settlement:
    delivery = factories.make_delivery(fire_at=datetime.now(UTC) - timedelta(seconds=2))
    return Settlement(delivery, status, error=error, **fields)  # type: ignore[arg-type]


def test_the_reason_is_the_kind_of_failure_without_its_detail() -> None:
    assert reason(f"HTTP 500: {SECRET}") == "HTTP 500"
    assert reason(None) == "unknown"
    assert len(reason("x" * 500)) == 80


def test_a_delivery_counts_its_outcome_duration_and_lateness() -> None:
    delivered = ("chronoq_deliveries_total", {"outcome": "delivered", "target_type": "webhook"})
    durations = ("chronoq_delivery_duration_seconds_count", {"target_type": "webhook"})
    lateness = (
        "chronoq_delivery_lateness_seconds_sum",
        {"origin": "schedule", "target_type": "webhook"},
    )
    before = [sample(name, **labels) for name, labels in (delivered, durations, lateness)]

    observe(settlement(OccurrenceStatus.DELIVERED), 0.01)

    after = [sample(name, **labels) for name, labels in (delivered, durations, lateness)]
    assert after[0] - before[0] == 1
    assert after[1] - before[1] == 1
    assert after[2] - before[2] >= 2.0  # due two seconds ago


def test_a_dead_letter_is_counted_and_logged_with_ids_and_no_detail(
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = sample("chronoq_dead_letters_total")
    caplog.set_level(logging.INFO, logger="app.worker.dispatcher")
    dead = settlement(OccurrenceStatus.DEAD_LETTERED, f"HTTP 410: {SECRET}")

    observe(dead, 0.01)

    assert sample("chronoq_dead_letters_total") - before == 1
    (record,) = [r for r in caplog.records if r.name == "app.worker.dispatcher"]
    assert record.levelno == logging.WARNING
    assert record.__dict__["occurrence_id"] == str(dead.delivery.occurrence_id)
    assert record.__dict__["outcome"] == "dead_lettered"
    assert record.__dict__["reason"] == "HTTP 410"
    assert "s3cret" not in record.getMessage()


def test_a_retry_is_logged_with_its_delay(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="app.worker.dispatcher")
    retry = settlement(OccurrenceStatus.PENDING, f"HTTP 503: {SECRET}", retry_in=2.5)

    observe(retry, 0.01)

    (record,) = [r for r in caplog.records if r.name == "app.worker.dispatcher"]
    assert record.levelno == logging.INFO
    assert "retrying in 2.5s: HTTP 503" in record.getMessage()
    assert record.__dict__["retry_in"] == 2.5
    assert "s3cret" not in record.getMessage()
