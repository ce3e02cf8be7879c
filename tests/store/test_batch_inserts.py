"""Schedules stored together are each stored as given: a batch of schedules that differ in
one field only, or in none but their ids, keeps every schedule's own values and writes one
first occurrence for each."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

from app.domain.ids import occurrence_id
from app.domain.occurrence import OccurrenceStatus
from app.domain.target import RabbitMQTarget, WebhookTarget
from tests.store import ports
from tests.store.ports import Database


def _in(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


async def test_a_batch_keeps_each_payload_as_written(database: Database) -> None:
    # Equal in Python (1 == 1.0 == True) but three JSON texts; then payloads of every kind.
    for payloads in ([{"n": 1}, {"n": 1.0}, {"n": True}], [[], "text", {"é": "\u2028"}, 2]):
        drafts = [ports.draft(ports.once(_in(3600)), payload=payload) for payload in payloads]

        await ports.insert_schedules(database, drafts)

        for draft, payload in zip(drafts, payloads, strict=True):
            stored = await ports.read_schedule(database, draft.id)
            assert json.dumps(stored.payload) == json.dumps(payload)


async def test_schedules_alike_but_for_their_ids_each_get_their_first_occurrence(
    database: Database,
) -> None:
    at = _in(3600)
    first = ports.draft(ports.once(at))
    drafts = [first, *(replace(first, id=ports.draft(ports.once(at)).id) for _ in range(4))]

    await ports.insert_schedules(database, drafts)

    rows = await ports.read_occurrence_rows(database)
    assert sorted(row.occurrence_id for row in rows) == sorted(
        occurrence_id(draft.id, at) for draft in drafts
    )
    assert {(row.fire_at, row.available_at, row.status) for row in rows} == {
        (at, at, OccurrenceStatus.PENDING)
    }


async def test_a_batch_keeps_each_schedules_own_settings(database: Database) -> None:
    drafts = [
        replace(ports.draft(ports.once(_in(60 + n)), max_attempts=1 + n % 3), name=name)
        for n, name in enumerate(["a", None, "b", None])
    ]

    await ports.insert_schedules(database, drafts)

    for draft in drafts:
        stored = await ports.read_schedule(database, draft.id)
        assert (stored.name, stored.max_attempts, stored.next_fire_at) == (
            draft.name,
            draft.max_attempts,
            draft.first_fire_at,
        )


async def test_one_schedule_alone_is_stored_too(database: Database) -> None:
    draft = ports.draft(ports.once(_in(60)), payload={"alone": True})

    await ports.insert_schedules(database, [draft])

    stored = await ports.read_schedule(database, draft.id)
    assert stored.payload == {"alone": True}
    assert [row.occurrence_id for row in await ports.read_occurrence_rows(database)] == [
        occurrence_id(draft.id, draft.first_fire_at)
    ]


async def test_a_batch_keeps_each_target_and_trigger_as_given(database: Database) -> None:
    # Numbers of every spelling, text beyond ASCII, header values of every JSON type.
    webhook = WebhookTarget(
        type="webhook",
        url="http://127.0.0.1:9/é",
        method="PUT",
        headers={"X-B": "ü ☕", "X-A": "1"},
        timeout_seconds=1e-05,
    )
    headers = {"big": 2**63 - 1, "low": -(2**63), "f": 2.5e15, "g": 1.5e-7, "flag": True}
    rabbitmq = RabbitMQTarget(
        type="rabbitmq",
        exchange="ex",
        routing_key="rk",
        headers={**headers, "one": 1, "one.0": 1.0, "none": None, "é": "ü"},
    )
    start = datetime(2030, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
    drafts = [
        replace(ports.draft(ports.interval(1.5, start)), target=webhook),
        replace(ports.draft(ports.cron("*/5 * * * *")), target=rabbitmq),
        replace(ports.draft(ports.once(_in(60))), target=rabbitmq),
    ]

    await ports.insert_schedules(database, drafts)

    for draft in drafts:
        stored = await ports.read_schedule(database, draft.id)
        assert _as_json(stored.target) == _as_json(draft.target)
        assert _as_json(stored.trigger) == _as_json(draft.trigger)


def _as_json(model: BaseModel) -> str:
    """As JSON, so that 1, 1.0 and true are told apart; keys in order (the stores keep the
    value of a target, not its text)."""
    return json.dumps(json.loads(model.model_dump_json()), sort_keys=True)
