"""`chronoq migrate` and `chronoq migrate --sql`: exit codes, one-line errors without the
password, and offline SQL that takes an empty database to head. In-process
(commands.in_process), but for an unreachable database, the command as a process of its own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.store.engine.database import Database
from app.store.engine.migrations import is_at_head
from tests.integration.cli.commands import chronoq, describe, differences, in_process, run_script
from tests.store.catalog import Catalog, read_catalog
from tests.store.catalog import differences as store_differences

PASSWORD = "s3cret-pw"
UNREACHABLE = f"postgresql://chronoq:{PASSWORD}@127.0.0.1:1/chronoq"


async def _at_head(url: str, db_schema: str | None) -> bool:
    database = Database(url, schema=db_schema)
    try:
        return await is_at_head(database)
    finally:
        await database.close()


def test_migrate_creates_a_sqlite_database_at_head(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'chronoq.db'}"

    first = in_process("migrate", DATABASE_URL=url)
    again = in_process("migrate", DATABASE_URL=url)

    assert first.returncode == 0, first.stderr
    assert again.returncode == 0, again.stderr
    assert "schema at head" in again.stdout


def test_an_unreachable_database_exits_1_with_one_line_and_no_password() -> None:
    # A process of its own: nothing it prints on its way out may add a line or the password.
    result = chronoq("migrate", DATABASE_URL=UNREACHABLE)

    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("chronoq: cannot reach postgresql://chronoq:***@127.0.0.1:1/")
    assert PASSWORD not in result.stderr + result.stdout


@pytest.mark.postgres
def test_a_missing_database_exits_1_with_one_line_and_no_password(postgres_url: str) -> None:
    missing = postgres_url.rsplit("/", 1)[0] + "/chronoq_no_such_database"
    with_password = missing.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@")

    result = in_process("migrate", DATABASE_URL=with_password)

    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "chronoq_no_such_database" in lines[0]
    assert "does not exist" in lines[0]
    assert PASSWORD not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("variables", "complaint"),
    [
        ({"DATABASE_URL": "sqlite:///chronoq.db", "CHRONOQ_DB_SCHEMA": "alpha"}, "PostgreSQL only"),
        ({"DATABASE_URL": UNREACHABLE, "CHRONOQ_DB_SCHEMA": "Alpha"}, "CHRONOQ_DB_SCHEMA must"),
        ({"DATABASE_URL": "oracle://scott@127.0.0.1/chronoq"}, "DATABASE_URL"),
    ],
)
def test_a_bad_configuration_exits_2_naming_the_variable(
    variables: dict[str, Any], complaint: str
) -> None:
    result = in_process("migrate", **variables)

    assert result.returncode == 2
    assert result.stderr.startswith("chronoq: ")
    assert complaint in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_migrate_sql_is_refused_for_sqlite_pointing_to_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'chronoq.db'}"

    result = in_process("migrate", "--sql", DATABASE_URL=url)

    assert result.returncode == 2
    assert "chronoq schema --dialect sqlite" in result.stderr
    assert not (tmp_path / "chronoq.db").exists()


@pytest.mark.postgres
@pytest.mark.parametrize("db_schema", [None, "offline"])
async def test_migrate_sql_takes_an_empty_postgresql_database_to_head(
    empty_postgres: Callable[[], str], db_schema: str | None
) -> None:
    variables: dict[str, Any] = {"DATABASE_URL": UNREACHABLE}
    if db_schema is not None:
        variables["CHRONOQ_DB_SCHEMA"] = db_schema
    printed = in_process("migrate", "--sql", **variables)
    assert printed.returncode == 0, printed.stderr
    assert PASSWORD not in printed.stdout
    from_sql, migrated = empty_postgres(), empty_postgres()
    assert not await _at_head(from_sql, db_schema)

    await run_script(from_sql, printed.stdout)

    assert await _at_head(from_sql, db_schema)
    online = in_process("migrate", **{**variables, "DATABASE_URL": migrated})
    assert online.returncode == 0, online.stderr
    schema = db_schema or "public"
    built, expected = await describe(from_sql, schema), await describe(migrated, schema)
    assert not differences(built, expected), "\n".join(differences(built, expected))
    # Migrating a database built from the printed SQL finds nothing left to do.
    again = in_process("migrate", **{**variables, "DATABASE_URL": from_sql})
    assert again.returncode == 0, again.stderr


def test_migrate_sql_in_a_schema_creates_it_and_keeps_the_version_table_there() -> None:
    result = in_process("migrate", "--sql", DATABASE_URL=UNREACHABLE, CHRONOQ_DB_SCHEMA="tenant_a")

    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines[:3] == [
        "BEGIN;",
        'CREATE SCHEMA IF NOT EXISTS "tenant_a";',
        'SET search_path TO "tenant_a";',
    ]
    assert "CREATE TABLE tenant_a.alembic_version (" in result.stdout


@pytest.mark.mysql
async def test_migrate_sql_takes_an_empty_mysql_database_to_head(
    empty_mysql: Callable[[], str],
) -> None:
    unreachable = f"mysql://chronoq:{PASSWORD}@127.0.0.1:1/chronoq"
    printed = in_process("migrate", "--sql", DATABASE_URL=unreachable)
    assert printed.returncode == 0, printed.stderr
    assert PASSWORD not in printed.stdout
    from_sql, migrated = empty_mysql(), empty_mysql()
    assert not await _at_head(from_sql, None)

    # As the mysql client runs a script: statement by statement (DDL commits each).
    database = Database(from_sql)
    try:
        async with database.engine.connect() as conn:
            for statement in printed.stdout.split(";\n"):
                if statement.strip():
                    await conn.exec_driver_sql(statement)
            await conn.commit()
    finally:
        await database.close()

    assert await _at_head(from_sql, None)
    online = in_process("migrate", DATABASE_URL=migrated)
    assert online.returncode == 0, online.stderr
    built, expected = await _catalog(from_sql), await _catalog(migrated)
    assert expected["indexes"]
    assert not store_differences(built, expected), "\n".join(store_differences(built, expected))
    again = in_process("migrate", DATABASE_URL=from_sql)
    assert again.returncode == 0, again.stderr


async def _catalog(url: str) -> Catalog:
    database = Database(url)
    try:
        return await read_catalog(database)
    finally:
        await database.close()
