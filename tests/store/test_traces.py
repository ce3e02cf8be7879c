"""Trace context: a schedule's stored traceparent comes back with each of its claimed
occurrences (plain and flow-keyed claims alike), and a settled attempt records the trace id
of the traceparent its delivery was sent with."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from app.domain.flow import FlowLimits
from app.domain.occurrence import OccurrenceStatus, Settlement
from tests.store import ports
from tests.store.ports import Database

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
STORED = f"00-{TRACE}-00f067aa0ba902b7-01"
# What a replica with traces on sends: its attempt span's, a child in the same trace.
ATTEMPT = f"00-{TRACE}-b7ad6b7169203331-01"


async def test_a_claim_hands_over_the_schedules_traceparent(database: Database) -> None:
    traced = ports.draft(ports.immediate(), traceparent=STORED)
    plain = ports.draft(ports.immediate())
    await ports.insert_schedules(database, [traced, plain])

    deliveries = await ports.claim(database, limit=10)

    assert {d.schedule_id: d.traceparent for d in deliveries} == {
        traced.id: STORED,
        plain.id: None,
    }


async def test_a_recurring_schedules_next_tick_carries_it_too(database: Database) -> None:
    schedule = ports.draft(ports.interval(60), traceparent=STORED)
    await ports.insert_schedules(database, [schedule])
    (first,) = await ports.claim(database, limit=1)
    await ports.settle(database, [Settlement(first, OccurrenceStatus.DELIVERED)])

    await ports.move_clock_past(database, first.fire_at + timedelta(seconds=60))
    (second,) = await ports.claim(database, limit=1)

    assert second.occurrence_id != first.occurrence_id
    assert second.traceparent == STORED


async def test_a_flow_keyed_claim_hands_it_over(database: Database) -> None:
    await ports.put_flow_key(database, "acme", FlowLimits(parallelism=2))
    now = datetime.now(UTC)
    schedule = ports.draft(
        ports.once(now - timedelta(seconds=1)), flow_key="acme", traceparent=STORED
    )
    await ports.insert_schedules(database, [schedule])

    (delivery,) = await ports.claim(database, limit=1)

    assert (delivery.flow_key, delivery.traceparent) == ("default/acme", STORED)


async def test_an_attempt_records_the_trace_id_it_was_sent_with(database: Database) -> None:
    traced = ports.draft(ports.immediate(), traceparent=STORED)
    plain = ports.draft(ports.immediate())
    await ports.insert_schedules(database, [traced, plain])
    deliveries = {d.schedule_id: d for d in await ports.claim(database, limit=10)}
    sent = dataclasses.replace(deliveries[traced.id], traceparent=ATTEMPT)

    await ports.settle(
        database,
        [
            Settlement(sent, OccurrenceStatus.DELIVERED, status_code=200),
            Settlement(deliveries[plain.id], OccurrenceStatus.PENDING, error="503", retry_in=5),
        ],
    )

    (traced_attempt,) = await ports.read_attempt_log(database, sent.occurrence_id)
    (plain_attempt,) = await ports.read_attempt_log(database, deliveries[plain.id].occurrence_id)
    assert traced_attempt.trace_id == TRACE
    assert plain_attempt.trace_id is None
