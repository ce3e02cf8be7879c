"""The schema: the migrations take an empty database to head, once; the DDL that
`chronoq schema` prints builds the same schema."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from tests.store import ports
from tests.store.catalog import differences, read_catalog
from tests.store.ports import Database


@asynccontextmanager
async def opened(url: str) -> AsyncIterator[Database]:
    database = Database(url)
    try:
        yield database
    finally:
        await database.close()


async def test_the_migrations_take_an_empty_database_to_head_and_a_second_run_changes_nothing(
    empty_store: Callable[[], str],
) -> None:
    async with opened(empty_store()) as database:
        assert not await ports.is_at_head(database)

        await ports.upgrade_to_head(database)

        assert await ports.is_at_head(database)
        schedule = ports.draft(ports.immediate())
        await ports.insert_schedules(database, [schedule])
        migrated = await read_catalog(database)
        assert {("schedules",), ("occurrences",)} <= migrated["tables"]

        await ports.upgrade_to_head(database)

        assert await ports.is_at_head(database)
        assert not differences(await read_catalog(database), migrated)
        (row,) = await ports.read_occurrence_rows(database, schedule.id)
        (delivery,) = await ports.claim(database, limit=1)
        assert delivery.occurrence_id == row.occurrence_id


async def test_the_ddl_builds_what_the_migrations_build(
    empty_store: Callable[[], str],
) -> None:
    async with opened(empty_store()) as from_ddl, opened(empty_store()) as migrated:
        await ports.build_from_ddl(from_ddl)
        await ports.upgrade_to_head(migrated)

        built, expected = await read_catalog(from_ddl), await read_catalog(migrated)

        assert expected["indexes"], "the migrations built no index: the comparison means nothing"
        assert expected["checks"], "no check constraint reflected: the comparison means nothing"
        assert not differences(built, expected), "\n".join(differences(built, expected))
        # Stamped at head: the service counts it as migrated, and it works.
        assert await ports.is_at_head(from_ddl)
        schedule = ports.draft(ports.immediate())
        await ports.insert_schedules(from_ddl, [schedule])
        (delivery,) = await ports.claim(from_ddl, limit=1)
        assert delivery.schedule_id == schedule.id
