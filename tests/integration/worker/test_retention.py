"""Retention: old delivered, cancelled and skipped occurrences are pruned in batches by one
replica at a time; pending ones and dead letters stay, and claims never wait behind it.

Occurrences are made through the API and the delivery loop, then aged by moving their
`updated_at` back in SQL.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app.store.dialects.postgresql import PRUNING_LOCK
from app.store.engine.database import Database
from app.store.records.retention import prune
from app.store.schema.partitions import ATTEMPTS
from app.store.schema.tables import occurrences, schedules
from app.worker.periodic import STOP_GRACE
from app.worker.pruner import Pruner
from tests.conftest import ALL_STORES, make_settings
from tests.factories import iso
from tests.integration.conftest import Harness
from tests.receiver import Reply
from tests.store import ports
from tests.tcp_proxy import TcpProxy
from tests.waiting import eventually, suspended_in

RETENTION = timedelta(days=7)
OLD = timedelta(days=8)


async def _true(value: bool) -> bool:
    return value


# -- occurrences in each status, made the way users make them ---------------------------


async def _delivered(harness: Harness) -> str:
    created = await harness.create()
    assert await harness.step() == 1
    return str(created["next_occurrence_id"])


async def _many_delivered(harness: Harness, count: int) -> list[str]:
    items = [{"event_type": "bulk", "target": harness.webhook()} for _ in range(count)]
    for item in items:
        item["trigger"] = {"type": "immediate"}
    response = await harness.client.post("/v1/schedules/batch", json={"items": items})
    assert response.status_code == 201, response.text
    ids = [str(item["next_occurrence_id"]) for item in response.json()["items"]]
    await harness.step_until(lambda: _all_in(harness, ids, "delivered"))
    return ids


async def _pending(harness: Harness) -> str:
    created = await harness.create(trigger={"type": "once", "delay_seconds": 3600})
    return str(created["next_occurrence_id"])


async def _retrying(harness: Harness) -> str:
    """Pending again after a failed attempt, waiting for its retry."""
    harness.receiver.always("/retry", Reply(503))
    created = await harness.create(target=harness.webhook("/retry"))
    assert await harness.step() == 1
    return str(created["next_occurrence_id"])


async def _dead_lettered(harness: Harness, path: str = "/gone") -> str:
    harness.receiver.always(path, Reply(410))
    created = await harness.create(target=harness.webhook(path))
    assert await harness.step() == 1
    return str(created["next_occurrence_id"])


async def _cancelled(harness: Harness) -> str:
    created = await harness.create(trigger={"type": "once", "delay_seconds": 3600})
    response = await harness.client.delete(f"/v1/schedules/{created['id']}")
    assert response.status_code in (200, 204), response.text
    return str(created["next_occurrence_id"])


async def _discarded(harness: Harness) -> str:
    """A dead letter an operator discarded: it is cancelled, and pruned like the others."""
    occurrence_id = await _dead_lettered(harness, "/discard")
    response = await harness.client.delete(f"/v1/dead-letters/{occurrence_id}")
    assert response.status_code == 204, response.text
    return occurrence_id


async def _skipped(harness: Harness) -> str:
    """A recurring schedule paused after its tick came due, before the loop reached it."""
    start = datetime.now(UTC) - timedelta(minutes=1)
    created = await harness.create(
        trigger={"type": "interval", "every_seconds": 1, "start_at": iso(start)}
    )
    await ports.move_clock_past(harness.database, datetime.fromisoformat(created["next_fire_at"]))
    response = await harness.client.post(f"/v1/schedules/{created['id']}/pause")
    assert response.status_code == 200, response.text
    return str(created["next_occurrence_id"])


# -- reading and ageing rows directly -------------------------------------------------


async def _statuses(database: Database) -> dict[str, str]:
    async def read(conn: Any) -> dict[str, str]:
        rows = await conn.execute(sa.select(occurrences.c.occurrence_id, occurrences.c.status))
        return {str(row.occurrence_id): row.status for row in rows}

    return await database.run(read)


async def _all_in(harness: Harness, ids: list[str], status: str) -> bool:
    statuses = await _statuses(harness.database)
    return all(statuses.get(id_) == status for id_ in ids)


async def _age(database: Database, ids: list[str] | None = None, by: timedelta = OLD) -> None:
    """Move the last change of `ids` (default: every occurrence) `by` into the past."""
    statement = occurrences.update().values(updated_at=datetime.now(UTC) - by)
    if ids is not None:
        statement = statement.where(occurrences.c.occurrence_id.in_([uuid.UUID(i) for i in ids]))

    async def work(conn: Any) -> None:
        await conn.execute(statement)

    await database.run(work)


async def _prune(database: Database, limit: int = 1000) -> int:
    cutoff = datetime.now(UTC) - RETENTION
    return await database.run(lambda conn: prune(conn, older_than=cutoff, limit=limit))


def _pruner(harness: Harness, **overrides: Any) -> Pruner:
    values: dict[str, Any] = {"retention": RETENTION.total_seconds(), **overrides}
    return Pruner(harness.database, make_settings(harness.settings.database_url, **values))


# -- what is pruned ---------------------------------------------------------------------


async def test_old_finished_occurrences_are_pruned_and_pending_and_dead_letters_kept(
    harness: Harness,
) -> None:
    finished = [
        await _delivered(harness),
        await _cancelled(harness),
        await _discarded(harness),
        await _skipped(harness),
    ]
    kept = {
        await _pending(harness): "pending",
        await _dead_lettered(harness): "dead_lettered",
        await _retrying(harness): "pending",
    }
    before = await _statuses(harness.database)
    assert {before[id_] for id_ in finished} == {"delivered", "cancelled", "skipped"}
    await _age(harness.database)

    assert await _prune(harness.database) == len(finished)

    assert await _statuses(harness.database) == kept
    assert await _prune(harness.database) == 0


async def test_recent_finished_occurrences_are_kept(harness: Harness) -> None:
    recent = [await _delivered(harness), await _cancelled(harness)]
    within = await _delivered(harness)
    await _age(harness.database, [within], by=RETENTION - timedelta(minutes=5))

    assert await _prune(harness.database) == 0

    assert set(await _statuses(harness.database)) == {*recent, within}


async def test_a_schedule_outlives_its_pruned_history(harness: Harness) -> None:
    harness.receiver.script("/flaky", Reply(503))
    created = await harness.create(target=harness.webhook("/flaky"))
    await harness.step_until(lambda: _all_in(harness, [created["next_occurrence_id"]], "delivered"))
    snapshot = await harness.get(f"/v1/schedules/{created['id']}")
    assert snapshot["attempts"] == 2
    await _age(harness.database)

    assert await _prune(harness.database) == 1

    after = await harness.get(f"/v1/schedules/{created['id']}")
    assert after["status"] == "completed"
    assert after["fire_count"] == 1
    assert after["last_fired_at"] == snapshot["last_fired_at"]
    # Derived from occurrences, which are gone: documented in app.store.records.retention.
    assert after["attempts"] == 0
    assert after["last_error"] is None
    assert await harness.occurrences(created["id"]) == []


async def test_a_batch_deletes_at_most_its_limit(harness: Harness) -> None:
    ids = await _many_delivered(harness, 25)
    await _age(harness.database)

    rounds = [await _prune(harness.database, limit=10) for _ in range(4)]

    assert rounds == [10, 10, 5, 0]
    assert not set(ids) & set(await _statuses(harness.database))


async def test_a_round_prunes_batch_after_batch_until_one_comes_back_short(
    harness: Harness,
) -> None:
    await _many_delivered(harness, 25)
    await _age(harness.database)
    pruner = _pruner(harness, retention_batch=10)

    assert await pruner.run_once() == 25

    assert pruner.pruned_total == 25
    assert await _statuses(harness.database) == {}
    assert await pruner.run_once() == 0


async def _age_schedules(database: Database, by: timedelta) -> None:
    """Move the last change of every schedule and occurrence `by` into the past."""

    async def work(conn: Any) -> None:
        await conn.execute(schedules.update().values(updated_at=datetime.now(UTC) - by))
        await conn.execute(occurrences.update().values(updated_at=datetime.now(UTC) - by))

    await database.run(work)


async def test_a_round_deletes_ended_schedules_past_their_retention_with_their_history(
    harness: Harness,
) -> None:
    ended = await harness.create()
    assert await harness.step() == 1
    running = await harness.create(trigger={"type": "interval", "every_seconds": 3600})
    assert await harness.step() == 1
    await _age_schedules(harness.database, timedelta(days=31))
    pruner = _pruner(harness, schedule_retention=timedelta(days=30).total_seconds())

    # Both delivered ticks (past the 7 days of occurrences), then the ended schedule.
    assert await pruner.run_once() == 3

    assert pruner.schedules_pruned_total == 1
    assert (await harness.client.get(f"/v1/schedules/{ended['id']}")).status_code == 404
    assert (await harness.client.get(f"/v1/schedules/{ended['id']}/events")).status_code == 404
    assert (await harness.client.get(f"/v1/schedules/{running['id']}")).status_code == 200


async def test_a_schedule_retention_of_0_keeps_ended_schedules(harness: Harness) -> None:
    ended = await harness.create()
    assert await harness.step() == 1
    await _age_schedules(harness.database, timedelta(days=3650))
    pruner = _pruner(harness, schedule_retention=0)

    assert await pruner.run_once() == 1  # its delivered occurrence, not the schedule

    assert (await harness.client.get(f"/v1/schedules/{ended['id']}")).status_code == 200


@ALL_STORES
async def test_a_retention_reaching_before_year_one_prunes_nothing(harness: Harness) -> None:
    await _delivered(harness)
    await _age(harness.database, by=timedelta(days=365 * 100))
    pruner = _pruner(harness, retention=1e15)

    assert await pruner.run_once() == 0

    assert len(await _statuses(harness.database)) == 1


# -- one replica at a time, and never in the way of claims (PostgreSQL) -----------------


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_nothing_is_pruned_while_another_replica_holds_the_pruning_lock(
    harness: Harness,
) -> None:
    ids = await _many_delivered(harness, 3)
    await _age(harness.database)
    async with harness.database.engine.connect() as other:
        await other.execute(sa.select(sa.func.pg_advisory_xact_lock(PRUNING_LOCK)))

        assert await _prune(harness.database) == 0
        assert set(await _statuses(harness.database)) == set(ids)

        await other.rollback()

    assert await _prune(harness.database) == 3


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_pruning_skips_rows_another_transaction_holds_instead_of_waiting(
    harness: Harness,
) -> None:
    ids = await _many_delivered(harness, 6)
    await _age(harness.database)
    held = [uuid.UUID(id_) for id_ in ids[:2]]
    async with harness.database.engine.connect() as other:
        await other.execute(
            sa.select(occurrences.c.occurrence_id)
            .where(occurrences.c.occurrence_id.in_(held))
            .with_for_update()
        )

        async with asyncio.timeout(5):
            assert await _prune(harness.database) == 4

        assert set(await _statuses(harness.database)) == {str(id_) for id_ in held}
        await other.rollback()

    assert await _prune(harness.database) == 2


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_claims_go_on_while_a_pruning_transaction_is_open(harness: Harness) -> None:
    await _many_delivered(harness, 5)
    await _age(harness.database)
    async with harness.database.engine.connect() as pruning:
        cutoff = datetime.now(UTC) - RETENTION
        assert await prune(pruning, older_than=cutoff, limit=100) == 5
        created = await harness.create()

        async with asyncio.timeout(5):
            assert await harness.step() == 1

        await pruning.commit()
    assert await _statuses(harness.database) == {created["next_occurrence_id"]: "delivered"}


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_the_loop_keeps_history_by_the_day_and_drops_a_day_past_retention(
    harness: Harness,
) -> None:
    delivered = await _delivered(harness)
    dead = await _dead_lettered(harness)
    logged = await harness.get(f"/v1/occurrences/{dead}/attempts")
    # Nine days on: today's partitions are past the 7 days of retention.
    harness.database.clock.move(timedelta(days=9))
    pruner = _pruner(harness, retention_interval=0.05)

    async with pruner.started():
        # Made at once, for the day it is now and two after it.
        await eventually(lambda: len(pruner.history.made) >= 6, within=10.0)  # type: ignore[union-attr]
        await eventually(lambda: pruner.pruned_total >= 1, within=10.0)

        async def only_the_dead_letters_attempt_left() -> bool:
            return await _rows(harness.database, "attempts") == 1

        await eventually(only_the_dead_letters_attempt_left, within=10.0)

    keeper = pruner.history
    assert keeper is not None
    now = await ports.database_now(harness.database)
    assert {ATTEMPTS.day(now.date() + timedelta(days=n)) for n in range(3)} <= set(keeper.made)
    ended = [ATTEMPTS.ends(name) for name in keeper.dropped if name.startswith("attempts")]
    assert ended
    assert all(end is not None and end <= now - RETENTION for end in ended)
    # The delivered occurrence went, and with it its attempt, by the day; the dead letter's
    # attempt log is whole.
    assert (await harness.client.get(f"/v1/occurrences/{delivered}")).status_code == 404
    assert await harness.get(f"/v1/occurrences/{dead}/attempts") == logged
    assert pruner.errors == 0


async def _rows(database: Database, table: str) -> int:
    async with database.engine.connect() as conn:
        return int((await conn.execute(sa.text(f"SELECT count(*) FROM {table}"))).scalar_one())


# -- the loop -------------------------------------------------------------------------


async def test_the_loop_prunes_by_itself_every_interval(harness: Harness) -> None:
    await _many_delivered(harness, 12)
    await _age(harness.database)
    pruner = _pruner(harness, retention_interval=0.05, retention_batch=5)

    async with pruner.started():
        await eventually(lambda: pruner.pruned_total == 12, within=10.0)
        late = await _delivered(harness)
        await _age(harness.database, [late])
        await eventually(lambda: pruner.pruned_total == 13, within=10.0)
        assert pruner.running

    assert not pruner.running
    assert pruner.errors == 0
    assert await _statuses(harness.database) == {}


async def test_the_loop_survives_a_failing_round_and_prunes_afterwards(harness: Harness) -> None:
    ids = await _many_delivered(harness, 3)
    await _age(harness.database)
    pruner = _pruner(harness, retention_interval=0.05)

    async def rename(old: str, new: str) -> None:
        async def work(conn: Any) -> None:
            await conn.execute(sa.text(f"ALTER TABLE {old} RENAME TO {new}"))

        await harness.database.run(work)

    # The table missing (say, a half-applied manual change) makes every round fail.
    await rename("occurrences", "occurrences_away")
    away = True
    try:
        async with pruner.started():
            await eventually(lambda: pruner.errors >= 2, within=10.0)
            assert pruner.running
            assert pruner.pruned_total == 0

            await rename("occurrences_away", "occurrences")
            away = False
            await eventually(lambda: pruner.pruned_total == len(ids), within=15)
    finally:
        if away:
            await rename("occurrences_away", "occurrences")
    assert await _statuses(harness.database) == {}


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_the_loop_rides_out_a_database_outage(harness: Harness) -> None:
    url = make_url(harness.settings.database_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    await proxy.start()
    proxied = url.set(port=proxy.port).render_as_string(hide_password=False)
    settings = make_settings(proxied, retention=RETENTION.total_seconds(), retention_interval=0.05)
    database = Database(settings.database_url)
    await _many_delivered(harness, 4)
    try:
        pruner = Pruner(database, settings)
        await proxy.cut()
        async with pruner.started():
            await eventually(lambda: pruner.errors >= 1, within=10.0)
            assert pruner.running

            await _age(harness.database)
            await proxy.restore()
            await eventually(lambda: pruner.pruned_total == 4, within=20)
    finally:
        await database.close()
        await proxy.close()


async def test_stopping_the_loop_is_prompt_while_it_waits_for_the_next_round(
    harness: Harness,
) -> None:
    pruner = _pruner(harness, retention_interval=3600)

    async with pruner.started():
        await eventually(lambda: suspended_in(pruner._task, "Periodic._pause"))
        assert pruner.running
        started = time.monotonic()

    # A stop that did not wake the wait would take its grace and then cancel the loop
    # (or, never cancelled, the whole interval).
    assert time.monotonic() - started < STOP_GRACE
    assert not pruner.running
    assert pruner.rounds == 0
