"""The asynchronous client against the app: typed answers, typed refusals with their fields,
cursors followed to the end, and every kind of operation an integration makes."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from app.client import (
    AsyncClient,
    ConflictError,
    DeadLetterOut,
    FlowKeyIn,
    NotFoundError,
    OccurrenceOut,
    PreconditionFailedError,
    ScheduleOut,
    SchedulePatch,
    TenantIn,
    ValidationError,
)
from tests.integration.conftest import Harness
from tests.receiver import Reply


@pytest.fixture
async def chronoq(harness: Harness) -> AsyncIterator[AsyncClient]:
    async with AsyncClient("http://localhost", transport=harness.transport) as client:
        yield client


def spec(harness: Harness, **extra: Any) -> dict[str, Any]:
    return {
        "event_type": "invoice.due",
        "payload": {"invoice": 7},
        "target": harness.webhook("/client"),
        "trigger": {"type": "cron", "expression": "0 9 * * *"},
        **extra,
    }


async def test_a_schedule_goes_through_its_life_as_typed_models(
    harness: Harness, chronoq: AsyncClient
) -> None:
    created = await chronoq.create_schedule(spec(harness, name="nightly"))
    assert isinstance(created, ScheduleOut)
    assert created.status == "pending"
    assert created.name == "nightly"

    fetched = await chronoq.get_schedule(created.id)
    assert fetched.id == created.id
    assert fetched.next_fire_at is not None

    paused = await chronoq.pause_schedule(created.id, if_match=fetched.version)
    assert paused.status == "paused"
    resumed = await chronoq.resume_schedule(str(created.id))
    assert resumed.status == "pending"

    patched = await chronoq.patch_schedule(
        created.id, SchedulePatch(max_attempts=2, labels={"team": "billing"})
    )
    assert (patched.max_attempts, patched.labels) == (2, {"team": "billing"})

    fired = await chronoq.trigger_schedule(created.id)
    assert isinstance(fired, OccurrenceOut)
    assert fired.origin == "trigger"
    occurrences = [o.occurrence_id async for o in chronoq.iter_occurrences(created.id)]
    assert fired.occurrence_id in occurrences

    cancelled = await chronoq.cancel_schedule(created.id)
    assert cancelled.status == "cancelled"
    kinds = [event.kind async for event in chronoq.iter_events(created.id)]
    assert kinds[0] == "created"
    assert kinds[-1] == "cancelled"
    assert {"paused", "resumed", "updated", "triggered"} <= set(kinds)


async def test_a_refusal_is_the_exception_of_its_status_naming_the_field(
    harness: Harness, chronoq: AsyncClient
) -> None:
    with pytest.raises(ValidationError) as refused:
        await chronoq.create_schedule(
            spec(harness, trigger={"type": "cron", "expression": "61 * * * *"})
        )
    assert refused.value.status == 422
    assert [e.pointer for e in refused.value.errors] == ["#/trigger/expression"]
    assert refused.value.errors[0].detail
    assert (await chronoq.list_schedules()).items == []

    with pytest.raises(NotFoundError) as missing:
        await chronoq.get_schedule(uuid.uuid4())
    assert missing.value.status == 404

    created = await chronoq.create_schedule(spec(harness))
    await chronoq.pause_schedule(created.id)
    with pytest.raises(PreconditionFailedError):
        await chronoq.resume_schedule(created.id, if_match=created.version)
    await chronoq.cancel_schedule(created.id)
    with pytest.raises(ConflictError):
        await chronoq.pause_schedule(created.id)


async def test_a_create_sent_twice_with_its_key_makes_one_schedule(
    harness: Harness, chronoq: AsyncClient
) -> None:
    first = await chronoq.create_schedule(spec(harness), idempotency_key="order-7")
    again = await chronoq.create_schedule(spec(harness), idempotency_key="order-7")
    assert again.id == first.id
    other = await chronoq.create_schedule(spec(harness))
    assert other.id != first.id
    assert len([s async for s in chronoq.iter_schedules()]) == 2


async def test_iterators_follow_the_cursors_to_the_last_page(
    harness: Harness, chronoq: AsyncClient
) -> None:
    made = await chronoq.create_schedules([spec(harness, name=f"s{n}") for n in range(7)])
    assert len(made.items) == 7

    first_page = await chronoq.list_schedules(limit=3)
    assert len(first_page.items) == 3
    assert first_page.next_cursor is not None
    every = [s.id async for s in chronoq.iter_schedules(limit=3)]
    assert sorted(every) == sorted(s.id for s in made.items)

    labelled = await chronoq.create_schedule(spec(harness, labels={"tier": "gold"}))
    gold = [s.id async for s in chronoq.iter_schedules(labels={"tier": "gold"}, limit=1)]
    assert gold == [labelled.id]


async def test_lists_find_what_fails_and_what_fires_next(
    harness: Harness, chronoq: AsyncClient
) -> None:
    harness.receiver.always("/down", Reply(503))
    broken = await chronoq.create_schedule(
        spec(
            harness,
            name="billing-sync",
            target=harness.webhook("/down"),
            trigger={"type": "interval", "every_seconds": 3600},
            max_attempts=1,
        )
    )
    await harness.step()
    soon = datetime.now(UTC) + timedelta(minutes=5)
    # An offset other than Z: the client writes the instant so that its `+` arrives.
    paris = soon.astimezone(timezone(timedelta(hours=1)))
    early = await chronoq.create_schedule(
        spec(harness, name="billing-soon", trigger={"type": "once", "at": paris.isoformat()})
    )

    failing = await chronoq.list_schedules(failing=True)
    assert [(s.id, s.consecutive_failures) for s in failing.items] == [(broken.id, 1)]
    assert failing.items[0].last_error is not None
    named = [s.id async for s in chronoq.iter_schedules(name_prefix="billing-", limit=1)]
    assert sorted(named) == sorted([broken.id, early.id])
    due = await chronoq.list_schedules(due_before=paris + timedelta(seconds=1), sort="next_fire_at")
    assert [s.id for s in due.items] == [early.id]
    by_failures = [s.id async for s in chronoq.iter_schedules(sort="failures", limit=1)]
    assert by_failures == [broken.id, early.id]
    (letter,) = (await chronoq.list_dead_letters()).items
    assert letter.schedule_name == "billing-sync"


async def test_dead_letters_are_listed_replayed_and_discarded(
    harness: Harness, chronoq: AsyncClient
) -> None:
    harness.receiver.always("/gone", Reply(410))
    failing = [
        await chronoq.create_schedule(
            spec(harness, target=harness.webhook("/gone"), trigger={"type": "immediate"})
        )
        for _ in range(3)
    ]
    await harness.step()

    dead = [d async for d in chronoq.iter_dead_letters(limit=2)]
    assert len(dead) == 3
    assert all(isinstance(d, DeadLetterOut) for d in dead)
    assert {d.schedule_id for d in dead} == {s.id for s in failing}
    one = await chronoq.get_dead_letter(dead[0].occurrence_id)
    assert one.last_error is not None
    assert one.last_error.startswith("HTTP 410")

    accepted = await chronoq.replay_dead_letter(dead[0].occurrence_id)
    assert accepted.occurrence_id == dead[0].occurrence_id
    with pytest.raises(ConflictError):
        await chronoq.replay_dead_letter(dead[0].occurrence_id)

    by_schedule = await chronoq.replay_dead_letters(schedule_id=dead[1].schedule_id)
    assert by_schedule.occurrence_ids == [dead[1].occurrence_id]

    await chronoq.discard_dead_letter(dead[2].occurrence_id)
    with pytest.raises(NotFoundError):
        await chronoq.get_dead_letter(dead[2].occurrence_id)

    await harness.step()  # the replays fail again, the receiver still says 410
    attempts = [a.attempt async for a in chronoq.iter_attempts(dead[0].occurrence_id)]
    assert attempts == [1, 1]


async def test_flow_keys_are_set_read_and_removed_under_their_version(
    chronoq: AsyncClient,
) -> None:
    put = await chronoq.put_flow_key("customer-42", FlowKeyIn(rate=50, parallelism=10))
    assert (put.rate, put.parallelism, put.version) == (50, 10, 1)

    with pytest.raises(PreconditionFailedError):
        await chronoq.put_flow_key("customer-42", {"rate": 5}, if_match=7)
    again = await chronoq.put_flow_key("customer-42", {"rate": 5}, if_match=put.version)
    assert (again.rate, again.parallelism) == (5, None)

    assert [k.key async for k in chronoq.iter_flow_keys()] == ["customer-42"]
    with pytest.raises(ValidationError) as refused:
        await chronoq.put_flow_key("customer-42", {"rate": 0})
    assert [e.pointer for e in refused.value.errors] == ["#/rate"]

    await chronoq.delete_flow_key("customer-42", if_match=again.version)
    assert (await chronoq.get_flow_key("customer-42")).rate is None


async def test_backfill_and_preview_answer_their_models(
    harness: Harness, chronoq: AsyncClient
) -> None:
    preview = await chronoq.preview_trigger(
        {"trigger": {"type": "interval", "every_seconds": 60}, "count": 3}
    )
    assert len(preview.fire_times) == 3
    assert preview.fire_times[1] - preview.fire_times[0] == timedelta(seconds=60)

    created = await chronoq.create_schedule(
        spec(harness, trigger={"type": "cron", "expression": "0 * * * *"})
    )
    now = datetime.now(UTC)
    filled = await chronoq.backfill_schedule(created.id, now - timedelta(hours=3), now)
    assert filled.created == 3
    assert all(tick.created for tick in filled.ticks)
    assert (await chronoq.health()).status == "ok"


async def test_a_client_acts_in_the_tenant_it_names(harness: Harness) -> None:
    async with (
        AsyncClient("http://localhost", transport=harness.transport) as operator,
        AsyncClient("http://localhost", transport=harness.transport, tenant="acme") as acme,
    ):
        made = await operator.put_tenant("acme", TenantIn(display_name="Acme"))
        assert (made.id, made.display_name, made.version) == ("acme", "Acme", 1)
        theirs = await acme.create_schedule(spec(harness, name="nightly"))
        ours = await operator.create_schedule(spec(harness, name="nightly"))
        assert (theirs.tenant, ours.tenant) == ("acme", "default")

        assert [s.id for s in (await acme.list_schedules()).items] == [theirs.id]
        with pytest.raises(NotFoundError):
            await acme.get_schedule(ours.id)
        with pytest.raises(NotFoundError):
            await operator.pause_schedule(theirs.id)
        assert [t.id async for t in operator.iter_tenants()] == ["acme", "default"]
        with pytest.raises(ConflictError):  # acme's schedule is live
            await operator.delete_tenant("acme")
        # The refused removal recorded nothing: the tenant's trail holds its creation only.
        (created,) = [e async for e in operator.iter_tenant_events("acme")]
        assert (created.kind, created.version, created.actor) == ("created", 1, None)
        page = await operator.list_tenant_events("acme", limit=1)
        assert ([e.id for e in page.items], page.next_cursor) == ([created.id], None)
        with pytest.raises(NotFoundError):
            await operator.list_tenant_events("nobody")
