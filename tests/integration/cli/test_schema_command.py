"""`chronoq schema`: the DDL of the current schema, printed with no database at hand; a
database built from it counts as migrated, serves, delivers, and matches the migrations.
In-process (commands.in_process), but for the DDL of the SQLite database that serves, which
the command prints as a process of its own."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from app.main import create_app
from app.store.engine.migrations import head_revisions
from tests.conftest import make_settings
from tests.integration.cli.commands import chronoq, describe, differences, in_process, run_script
from tests.receiver import Receiver

# Where the command would connect if it tried: nothing listens on port 1.
UNREACHABLE = "postgresql://chronoq:s3cret-pw@127.0.0.1:1/chronoq"


def ddl(dialect: str, db_schema: str | None = None, *, process: bool = False) -> str:
    """The DDL `chronoq schema` prints: in-process, or as a process of its own."""
    args = ["schema", "--dialect", dialect]
    if db_schema is not None:
        args += ["--db-schema", db_schema]
    result = (chronoq if process else in_process)(*args, DATABASE_URL=UNREACHABLE)
    assert result.returncode == 0, result.stderr
    return result.stdout


FIRST_ATTEMPTS = "status = 'pending' AND flow_key IS NULL AND first_attempt_at IS NULL"


@pytest.mark.parametrize(
    ("dialect", "claim_index"),
    [
        ("postgresql", f"ON occurrences (available_at) WHERE {FIRST_ATTEMPTS};"),
        ("sqlite", f"ON occurrences (available_at) WHERE {FIRST_ATTEMPTS};"),
        # No partial indexes: the status and the key lead instead.
        ("mysql", "ON occurrences (status, flow_key, available_at);"),
    ],
)
def test_schema_prints_the_ddl_with_no_database_reachable(dialect: str, claim_index: str) -> None:
    result = in_process("schema", "--dialect", dialect, DATABASE_URL=UNREACHABLE)

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "CREATE TABLE schedules (" in result.stdout
    assert "CREATE TABLE occurrences (" in result.stdout
    assert f"CREATE INDEX ix_occurrences_claim {claim_index}" in result.stdout
    (head,) = head_revisions()
    assert f"INSERT INTO alembic_version (version_num) VALUES ('{head}');" in result.stdout


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--dialect", "sqlite", "--db-schema", "alpha"], "--db-schema is for PostgreSQL only"),
        (["--dialect", "postgresql", "--db-schema", "Alpha"], "--db-schema must be a plain"),
        (["--dialect", "postgresql", "--db-schema", "pg_x"], "PostgreSQL system schema"),
        (["--dialect", "oracle"], "invalid choice"),
        ([], "--dialect"),
    ],
)
def test_schema_usage_errors_exit_2_with_one_line(args: list[str], complaint: str) -> None:
    result = in_process("schema", *args)

    assert result.returncode == 2
    assert result.stdout == ""
    assert complaint in result.stderr.strip().splitlines()[-1]


def _sqlite_database(path: Path, script: str) -> str:
    with sqlite3.connect(path) as connection:
        connection.executescript(script)
    connection.close()
    return f"sqlite:///{path}"


async def _serve_and_deliver(url: str, db_schema: str | None, receiver: Receiver) -> None:
    """Start the service on `url` without migrating it, and deliver one schedule."""
    settings = make_settings(url, db_schema=db_schema, worker_enabled=True, auto_migrate=False)
    app = create_app(settings)
    async with LifespanManager(app) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            ready = await client.get("/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json()["checks"]["database"] == "ok"

            created = await client.post(
                "/v1/schedules",
                json={
                    "event_type": "ddl.built",
                    "payload": {"from": "ddl"},
                    "target": {"type": "webhook", "url": receiver.url("/ddl")},
                    "trigger": {"type": "immediate"},
                },
            )
            assert created.status_code == 201, created.text
            schedule = created.json()

            (delivery,) = await receiver.wait_for(1, "/ddl")
            assert delivery.occurrence_id == schedule["next_occurrence_id"]
            deadline = time.monotonic() + 10
            while True:
                current = (await client.get(f"/v1/schedules/{schedule['id']}")).json()
                if current["status"] == "completed":
                    break
                assert time.monotonic() < deadline, current
                await asyncio.sleep(0.05)


async def test_a_sqlite_database_built_from_the_ddl_serves_and_delivers(
    tmp_path: Path, receiver: Receiver
) -> None:
    url = _sqlite_database(tmp_path / "chronoq.db", ddl("sqlite", process=True))

    await _serve_and_deliver(url, None, receiver)


@pytest.mark.postgres
@pytest.mark.parametrize("db_schema", [None, "from_ddl"])
async def test_a_postgresql_database_built_from_the_ddl_serves_and_delivers(
    empty_postgres: Callable[[], str], receiver: Receiver, db_schema: str | None
) -> None:
    url = empty_postgres()
    await run_script(url, ddl("postgresql", db_schema))

    await _serve_and_deliver(url, db_schema, receiver)


@pytest.mark.postgres
@pytest.mark.parametrize("db_schema", [None, "compared"])
async def test_the_ddl_builds_what_the_migrations_build_on_postgresql(
    empty_postgres: Callable[[], str], db_schema: str | None
) -> None:
    from_ddl, migrated = empty_postgres(), empty_postgres()
    await run_script(from_ddl, ddl("postgresql", db_schema))
    variables: dict[str, Any] = {"DATABASE_URL": migrated}
    if db_schema is not None:
        variables["CHRONOQ_DB_SCHEMA"] = db_schema
    result = in_process("migrate", **variables)
    assert result.returncode == 0, result.stderr

    schema = db_schema or "public"
    built, expected = await describe(from_ddl, schema), await describe(migrated, schema)

    assert expected["indexes"], "the migrations built no index: the comparison means nothing"
    assert not differences(built, expected), "\n".join(differences(built, expected))


def _sqlite_catalog(path: Path) -> dict[str, set[tuple[object, ...]]]:
    with sqlite3.connect(path) as connection:
        objects = connection.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        ).fetchall()
        columns = {
            (table, *column[1:])
            for _, table, _, _ in (o for o in objects if o[0] == "table")
            for column in connection.execute(f"PRAGMA table_info({table})").fetchall()
        }
    connection.close()
    return {
        "indexes": {(name, table, sql) for kind, name, table, sql in objects if kind == "index"},
        # SQLite keeps constraints only in the table's CREATE text.
        "constraints": {
            (table, name)
            for kind, _, table, sql in objects
            if kind == "table"
            for name in re.findall(r"CONSTRAINT (\w+)", sql)
        },
        "columns": columns,
    }


def test_the_ddl_builds_what_the_migrations_build_on_sqlite(tmp_path: Path) -> None:
    _sqlite_database(tmp_path / "from_ddl.db", ddl("sqlite"))
    migrated = tmp_path / "migrated.db"
    result = in_process("migrate", DATABASE_URL=f"sqlite:///{migrated}")
    assert result.returncode == 0, result.stderr

    built = _sqlite_catalog(tmp_path / "from_ddl.db")
    expected = _sqlite_catalog(migrated)

    assert expected["indexes"]
    assert not differences(built, expected), "\n".join(differences(built, expected))
