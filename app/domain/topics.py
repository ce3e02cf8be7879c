"""Topics and subscriptions (DESIGN section 15): a schedule that targets a topic fans each
of its occurrences out, as it fires, to one delivery per subscription that matches it then,
each delivered to its subscription's endpoint under the endpoint's limits and circuit.

Invariants:
- A delivery's id is the UUIDv5 of its occurrence's id and its subscription's id
  (`delivery_id`): a fan-out made twice makes the same rows, so the store keeps one.
- Matching reads only the occurrence's event type and the top-level fields of its payload,
  and compares values by their JSON type too (`true` is not `1`).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

from app.domain.errors import NotFoundError

TOPIC_NAME = re.compile(r"[A-Za-z0-9._:-]{1,128}")
MAX_EVENT_TYPES = 20
MAX_MATCH_FIELDS = 20
MAX_MATCH_VALUES = 50
MAX_TOPIC_DESCRIPTION = 1000


def missing_topic(topic: str) -> NotFoundError:
    return NotFoundError(f"topic {topic[:128]} not found")


def missing_subscription(subscription_id: uuid.UUID | str) -> NotFoundError:
    return NotFoundError(f"subscription {subscription_id} not found")


def delivery_id(occurrence_id: uuid.UUID, subscription_id: uuid.UUID) -> uuid.UUID:
    """The id of the delivery of `occurrence_id` to `subscription_id` (its `webhook-id`
    and `Idempotency-Key`)."""
    return uuid.uuid5(occurrence_id, str(subscription_id))


@dataclass(frozen=True, slots=True, kw_only=True)
class Topic:
    tenant: str
    name: str
    description: str | None
    version: int
    created_at: datetime
    updated_at: datetime
    subscriptions: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionSpec:
    """What a subscription matches: event types by glob (None: all) and top-level payload
    fields (a value must equal, a list means one of; None: any payload)."""

    topic: str
    endpoint_id: uuid.UUID
    event_types: tuple[str, ...] | None = None
    match: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscription:
    id: uuid.UUID
    tenant: str
    spec: SubscriptionSpec
    version: int
    created_at: datetime
    updated_at: datetime


def _same(value: Any, wanted: Any) -> bool:
    """JSON equality: the same type (a boolean is no number) and the same value."""
    if isinstance(value, bool) or isinstance(wanted, bool):
        return isinstance(value, bool) and isinstance(wanted, bool) and value == wanted
    if isinstance(value, int | float) and isinstance(wanted, int | float):
        return value == wanted
    return type(value) is type(wanted) and value == wanted


def matches(spec: SubscriptionSpec, event_type: str, payload: Any) -> bool:
    """Whether an occurrence of `event_type` with `payload` is delivered to `spec`."""
    if spec.event_types is not None and not any(
        fnmatchcase(event_type, pattern) for pattern in spec.event_types
    ):
        return False
    if not spec.match:
        return True
    if not isinstance(payload, dict):
        return False
    for field, wanted in spec.match.items():
        if field not in payload:
            return False
        value = payload[field]
        options = wanted if isinstance(wanted, list) else [wanted]
        if not any(_same(value, option) for option in options):
            return False
    return True
