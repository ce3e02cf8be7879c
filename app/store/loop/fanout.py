"""Fan-out (DESIGN section 15): a topic's occurrence, as its claim fires it, becomes one
delivery per subscription that matches it then, in the claim's transaction, and is
`completed` itself.

Invariants:
- The deliveries are written in the transaction that leases the occurrence, with ids
  derived from it and their subscriptions (`delivery_id`): a claim that rolls back (its
  replica died) leaves the occurrence pending and no delivery, and the next claim makes the
  same ones; none is made twice.
- Each delivery is an occurrence row of its own (origin `fanout`) under its endpoint's
  flow key: its own attempts, retries, dead letter and replay, its endpoint's limits and
  circuit. One failing subscriber holds back none of the others.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.occurrence import Delivery, OccurrenceStatus, Origin
from app.domain.target import TopicTarget
from app.domain.tenants import endpoint_key
from app.domain.topics import delivery_id, matches
from app.store.dialects import dialect_of
from app.store.records.topics import subscriptions_of
from app.store.schema.tables import by_key, occurrences

_o = occurrences.c


def _payload(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None  # a payload this decoder cannot read matches no `match`


async def fan_out(
    conn: AsyncConnection, parents: Sequence[Delivery], token: uuid.UUID, now: datetime
) -> int:
    """Write the deliveries of the topic occurrences `parents` (leased by `token`) and
    complete them; how many deliveries were made."""
    named = {(d.tenant, d.target.topic) for d in parents if isinstance(d.target, TopicTarget)}
    subscribed = await subscriptions_of(conn, named)
    rows: list[dict[str, Any]] = []
    for parent in parents:
        assert isinstance(parent.target, TopicTarget)
        payload = _payload(parent.body)
        # Never before the occurrence's instant (a claim ahead fans out early).
        due = max(now, parent.due_at or parent.fire_at)
        for subscription in subscribed.get((parent.tenant, parent.target.topic), []):
            if not matches(subscription.spec, parent.event_type, payload):
                continue
            rows.append(
                {
                    "occurrence_id": delivery_id(parent.occurrence_id, subscription.id),
                    "schedule_id": parent.schedule_id,
                    "fire_at": parent.fire_at,
                    "available_at": due,
                    "status": OccurrenceStatus.PENDING,
                    "origin": Origin.FANOUT,
                    "attempts": 0,
                    "created_at": now,
                    "updated_at": now,
                    "flow_key": endpoint_key(parent.tenant, subscription.spec.endpoint_id),
                    "parent_id": parent.occurrence_id,
                    "subscription_id": subscription.id,
                }
            )
    # From arrays where the database takes them: one statement and one plan whatever the
    # number of deliveries, written while the burst they belong to is due.
    await dialect_of(conn).insert_rows(conn, occurrences, rows, ignoring="occurrence_id")
    await conn.execute(
        occurrences.update()
        .where(
            _o.occurrence_id.in_([d.occurrence_id for d in parents]),
            _o.lease_token == token,
            by_key(_o.status) == OccurrenceStatus.PENDING.value,
        )
        .values(
            status=OccurrenceStatus.COMPLETED.value,
            available_at=None,
            lease_token=None,
            last_error=None,
            updated_at=now,
        )
    )
    return len(rows)
