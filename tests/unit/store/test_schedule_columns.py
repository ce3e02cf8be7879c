"""One list of a schedule's fields: the domain dataclasses. The `schedules` columns, the
row mapping and the response all follow it, and drift between them fails here."""

from __future__ import annotations

import json
import uuid
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy.engine import Row

from app.api.schedule_schemas import NOT_SHOWN, ScheduleOut
from app.domain.ids import occurrence_id
from app.domain.misfire import Rules
from app.domain.schedule import (
    DERIVED_FIELDS,
    RULE_FIELDS,
    Schedule,
    ScheduleDefinition,
    ScheduleDraft,
    ScheduleSpec,
    ScheduleStatus,
    first_snapshot,
    flat,
)
from app.domain.target import WebhookTarget
from app.domain.trigger import IntervalTrigger
from app.store.records.schedules import (
    COPIED_COLUMNS,
    RULES_COLUMNS,
    STORE_ONLY_COLUMNS,
    STORED_FIELDS,
    _to_row,
    _to_schedule,
)
from app.store.schema.tables import schedules

NOW = datetime(2027, 1, 4, 12, 0, tzinfo=UTC)
FIRST = datetime(2027, 1, 4, 12, 1, tzinfo=UTC)

COLUMNS = {column.name for column in schedules.c}
FIELDS = {f.name for f in fields(Schedule)}


def draft() -> ScheduleDraft:
    return ScheduleDraft(
        id=uuid.UUID("01900000-0000-7000-8000-000000000001"),
        name="nightly",
        event_type="report.due",
        payload={"n": [1, 2]},
        target=WebhookTarget(type="webhook", url="http://127.0.0.1:9/hook"),
        trigger=IntervalTrigger(type="interval", every_seconds=60, start_at=FIRST),
        max_attempts=7,
        labels={"team": "ops"},
        first_fire_at=FIRST,
        jitter_seconds=2.5,
        rules=Rules(policy="fire_all", grace_seconds=5.0, max_catchup=3, max_occurrences=9),
        first_delay=1.25,
        idempotency_key="key-1",
        request_hash="abc",
        created_by="ci",
    )


def test_every_schedules_column_is_a_domain_field_or_named_as_store_only() -> None:
    mapped = set(STORED_FIELDS) | RULES_COLUMNS | COPIED_COLUMNS.keys()

    assert COLUMNS - mapped == STORE_ONLY_COLUMNS


def test_every_domain_field_is_a_column_or_derived_from_occurrences() -> None:
    stored = FIELDS - {"rules"} - DERIVED_FIELDS

    assert stored <= COLUMNS
    assert not DERIVED_FIELDS & COLUMNS
    assert DERIVED_FIELDS <= FIELDS
    assert set(RULE_FIELDS) <= COLUMNS


def test_a_draft_holds_the_definition_and_its_first_occurrence() -> None:
    definition = {f.name for f in fields(ScheduleDefinition)}
    own = {f.name for f in fields(ScheduleDraft)} - definition

    assert definition <= FIELDS
    assert own == {"first_fire_at", "first_delay", "idempotency_key", "traceparent"}
    assert {"idempotency_key", "traceparent"} <= STORE_ONLY_COLUMNS


def test_the_spec_names_the_rules_as_the_columns_do() -> None:
    assert set(RULE_FIELDS) <= ScheduleSpec.model_fields.keys()


def test_a_response_shows_every_field_but_the_ones_named_not_shown() -> None:
    assert set(ScheduleOut.model_fields) == flat(first_snapshot(draft(), NOW)).keys() - NOT_SHOWN


def test_a_first_snapshot_is_pending_with_its_first_occurrence_next() -> None:
    schedule = first_snapshot(draft(), NOW)

    assert schedule.status is ScheduleStatus.PENDING
    assert (schedule.fire_count, schedule.skipped_count, schedule.attempts) == (0, 0, 0)
    assert schedule.version == 1
    assert schedule.created_at == schedule.updated_at == NOW
    assert schedule.next_fire_at == FIRST
    assert schedule.next_occurrence_id == occurrence_id(schedule.id, FIRST)
    assert schedule.rules == draft().rules


def test_the_inserted_row_holds_every_column_but_the_ones_statements_own() -> None:
    row = _to_row(first_snapshot(draft(), NOW))

    assert row.keys() == COLUMNS - STORE_ONLY_COLUMNS
    assert row["target_type"] == "webhook"
    # Targets and triggers go as their JSON text, which every dialect writes as it is.
    assert json.loads(row["target"])["url"] == "http://127.0.0.1:9/hook"
    assert json.loads(row["trigger"])["every_seconds"] == 60
    assert row["tick_count"] == 0
    assert row["misfire_policy"] == "fire_all"


class _Row:
    """What the select gives back: the columns by name and by attribute."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._mapping = values

    def __getattr__(self, name: str) -> Any:
        return self._mapping[name]


def test_a_schedule_reads_back_as_it_was_written() -> None:
    schedule = first_snapshot(draft(), NOW)
    written = _to_row(schedule)
    read: dict[str, Any] = written | {
        "payload": json.dumps(written["payload"]),  # selected as its stored text
        "idempotency_key": "key-1",
        "paused_at": None,
        "traceparent": None,
        "next_fire_at": schedule.next_fire_at,
        "next_occurrence_id": schedule.next_occurrence_id,
        "attempts": None,  # no occurrence attempted yet
        "last_error": None,
    }

    assert _to_schedule(cast(Row[Any], _Row(read))) == schedule
