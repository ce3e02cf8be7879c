"""Factories for domain values and the API's spellings of them, used across the tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from app.domain.occurrence import Delivery
from app.domain.target import WebhookTarget


def make_delivery(**overrides: Any) -> Delivery:
    """A claimed webhook delivery with fixed ids; override any field."""
    values: dict[str, Any] = {
        "occurrence_id": uuid.UUID("6f1d2c3b-4a59-5e8f-9d0c-1b2a3c4d5e6f"),
        "schedule_id": uuid.UUID("01900000-0000-7000-8000-000000000001"),
        "fire_at": datetime(2024, 3, 5, 10, 30, tzinfo=UTC),
        "attempt": 1,
        "max_attempts": 5,
        "lease_token": uuid.UUID("01900000-0000-7000-8000-00000000000a"),
        "event_type": "invoice.due",
        "body": b'{"invoice": 42}',
        "target": WebhookTarget(type="webhook", url="http://127.0.0.1:9/hook"),
        "one_shot": True,
    }
    values.update(overrides)
    return Delivery(**values)


def iso(instant: datetime) -> str:
    """An instant as the API writes one: ISO 8601 with a Z for UTC."""
    return instant.isoformat().replace("+00:00", "Z")
