"""Idempotency keys are per API key: the same key sent with two API keys names two
schedules, and with no API keys set it is stored as it always was."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from app.domain.errors import ConflictError
from app.domain.schedule import ScheduleDraft
from tests.store import ports
from tests.store.ports import Database

KEY = "order-7781"


def _draft(principal: str | None, key: str = KEY) -> ScheduleDraft:
    at = datetime.now(UTC) + timedelta(hours=1)
    return replace(ports.draft(ports.once(at)), idempotency_key=key, created_by=principal)


async def test_one_idempotency_key_sent_with_each_api_key_names_a_schedule_of_each(
    database: Database,
) -> None:
    drafts = [_draft("deploy-bot"), _draft("ops"), _draft(None)]

    await ports.insert_schedules(database, drafts)

    for draft in drafts:
        found = await ports.find_by_idempotency_key(database, KEY, draft.created_by)
        assert found is not None
        assert found.id == draft.id
    assert await ports.find_by_idempotency_key(database, KEY, "someone-else") is None


async def test_an_idempotency_key_used_twice_by_one_api_key_conflicts(database: Database) -> None:
    await ports.insert_schedules(database, [_draft("ops")])

    with pytest.raises(ConflictError):
        await ports.insert_schedules(database, [_draft("ops")])


@pytest.mark.parametrize("key", ["k" * 255, "ключ-\u00e9", "a\x7fb"])
async def test_the_longest_and_any_key_fit_once_scoped(database: Database, key: str) -> None:
    draft = _draft("a" * 64, key)

    await ports.insert_schedules(database, [draft])

    found = await ports.find_by_idempotency_key(database, key, "a" * 64)
    assert found is not None
    assert found.id == draft.id


async def test_with_no_api_keys_the_key_is_stored_as_rows_before_scoping_hold_it(
    database: Database,
) -> None:
    draft = _draft(None)

    await ports.insert_schedules(database, [draft])

    assert await ports.read_idempotency_column(database, draft.id) == KEY
