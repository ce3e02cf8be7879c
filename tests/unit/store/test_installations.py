"""What keeps installations in one database apart without a database: the wake-up channel,
the advisory lock keys, the generated DDL, and error lines free of passwords."""

from __future__ import annotations

import re

import pytest

from app.store.dialects.pg_listen import CHANNEL, due_channel
from app.store.dialects.postgresql import (
    PRUNING_LOCK,
    advisory_key,
    migration_lock_key,
    pruning_lock_key,
    quote_schema,
)
from app.store.engine.database import Database, describe_failure
from app.store.engine.ddl import schema_ddl
from app.store.engine.migrations import head_revisions
from app.store.schema.tables import metadata


def test_the_default_installation_keeps_its_channel_and_lock_keys() -> None:
    assert due_channel(None) == CHANNEL == "chronoq_due"
    assert pruning_lock_key(None) == PRUNING_LOCK
    assert migration_lock_key(None) == 0x43_48_52_4F_4E_51


def test_each_schema_has_its_own_channel() -> None:
    assert due_channel("alpha") == "chronoq_due_alpha"
    assert len({due_channel(None), due_channel("alpha"), due_channel("beta")}) == 3


def test_a_channel_fits_postgresql_identifiers_however_long_the_schema() -> None:
    long_names = ["a" * 63, "a" * 62 + "b"]

    channels = [due_channel(name) for name in long_names]

    assert all(len(channel) <= 63 for channel in channels)
    assert channels[0] != channels[1]


def test_each_schema_has_its_own_lock_keys_in_the_bigint_range() -> None:
    keys = [
        key(schema)
        for schema in ("alpha", "beta", None)
        for key in (migration_lock_key, pruning_lock_key)
    ]

    assert len(set(keys)) == len(keys)
    assert all(-(2**63) <= key < 2**63 for key in keys)
    assert advisory_key("migrate", "alpha", 1) == migration_lock_key("alpha")


def test_schema_names_are_always_quoted() -> None:
    assert quote_schema("alpha") == '"alpha"'
    assert quote_schema("user") == '"user"'


def test_a_schema_is_refused_for_sqlite() -> None:
    with pytest.raises(ValueError, match="PostgreSQL only"):
        Database("sqlite:///:memory:", schema="alpha")


def test_a_failure_line_never_carries_the_password() -> None:
    url = "postgresql://chronoq:hunter22@db.internal:5432/chronoq"
    error = RuntimeError(f"could not connect with {url} (password hunter22)\nsecond line")

    line = describe_failure(error, url)

    assert "hunter22" not in line
    assert "\n" not in line
    assert line.startswith("RuntimeError: could not connect with postgresql://chronoq:***@")


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_the_ddl_creates_every_table_and_index_and_stamps_the_head(dialect: str) -> None:
    ddl = schema_ddl(dialect)

    for table in metadata.sorted_tables:
        assert f"CREATE TABLE {table.name} (" in ddl
        for index in table.indexes:
            create = "CREATE UNIQUE INDEX" if index.unique else "CREATE INDEX"
            assert f"{create} {index.name} ON {table.name} " in ddl
    assert (
        "CREATE INDEX ix_occurrences_claim ON occurrences (available_at) "
        "WHERE status = 'pending' AND flow_key IS NULL AND first_attempt_at IS NULL;" in ddl
    )
    assert "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)" in ddl
    (head,) = head_revisions()
    assert f"INSERT INTO alembic_version (version_num) VALUES ('{head}');" in ddl


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_every_ddl_statement_ends_with_a_semicolon(dialect: str) -> None:
    statements = [
        chunk for chunk in schema_ddl(dialect).split("\n\n") if not chunk.startswith("--")
    ]

    assert statements
    assert all(statement.rstrip().endswith(";") for statement in statements)


def test_the_ddl_for_a_schema_creates_it_and_qualifies_every_name() -> None:
    ddl = schema_ddl("postgresql", "alpha")

    assert "CREATE SCHEMA IF NOT EXISTS alpha;" in ddl
    assert "CREATE TABLE alpha.schedules (" in ddl
    assert "REFERENCES alpha.schedules (id)" in ddl
    assert "CREATE INDEX ix_occurrences_claim ON alpha.occurrences " in ddl
    assert "INSERT INTO alpha.alembic_version " in ddl
    assert "CREATE TABLE alpha.attempts_kept PARTITION OF alpha.attempts DEFAULT;" in ddl
    unqualified = re.findall(r"\b(?:TABLE|ON|INTO|REFERENCES|OF) (?!alpha\.|DELETE\b)(\w+)", ddl)
    assert unqualified == []


def test_a_schema_name_that_is_a_keyword_is_quoted_in_the_ddl() -> None:
    ddl = schema_ddl("postgresql", "user")

    assert 'CREATE SCHEMA IF NOT EXISTS "user";' in ddl
    assert 'CREATE TABLE "user".schedules (' in ddl
