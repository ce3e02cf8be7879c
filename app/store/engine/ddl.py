"""The schema as DDL for one dialect, generated from the table metadata without a database.

Invariant: a database built from this DDL is what the migrations build (the same tables,
constraints and indexes, under the same names), stamped at the head revision, so the
service finds it migrated and `chronoq migrate` later upgrades it like any other.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.schema import CreateIndex, CreateTable, ExecutableDDLElement

from app.domain.tenants import DEFAULT_TENANT
from app.store import dialects
from app.store.engine.migrations import head_revisions
from app.store.schema.partitions import PARTITIONED, History, partitioned_table
from app.store.schema.tables import metadata, table_indexes, tenants

DIALECTS = dialects.NAMES


def _version_table(schema: str | None) -> sa.Table:
    """Alembic's own version table, as alembic creates it."""
    return sa.Table(
        "alembic_version",
        sa.MetaData(),
        sa.Column("version_num", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
        schema=schema,
    )


def default_partition(history: History, dialect: sa.engine.Dialect, schema: str | None) -> str:
    """The statement that makes `history`'s default partition (`<table>_kept`)."""
    quote = dialect.identifier_preparer.quote
    where = "" if schema is None else dialect.identifier_preparer.quote_schema(schema) + "."
    return (
        f"CREATE TABLE {where}{quote(history.kept)} PARTITION OF {where}{quote(history.name)}"
        " DEFAULT;"
    )


def schema_ddl(dialect_name: str, schema: str | None = None) -> str:
    """The statements that build the current schema in an empty database (or, on
    PostgreSQL, in `schema`, created if missing), each ending with `;`, in one transaction."""
    ours = dialects.named(dialect_name)
    if schema is not None and not ours.backend.schemas:
        raise ValueError("a database schema is for PostgreSQL only")
    dialect = ours.sql_dialect()
    # Tables are defined without a schema; a given one qualifies every name they render.
    translate: dict[str, Any] = {}
    if schema is not None:
        translate = {"schema_translate_map": {None: schema}, "render_schema_translate": True}

    def render(element: ExecutableDDLElement | sa.Insert, *, literal: bool = False) -> str:
        compiled = element.compile(
            dialect=dialect, compile_kwargs={"literal_binds": literal}, **translate
        )
        text = str(compiled).strip()
        return "\n".join(line.rstrip() for line in text.splitlines()) + ";"

    heads = sorted(head_revisions())
    where = f" in schema {schema}" if schema is not None else ""
    statements = [f"-- Chronoq schema at revision {', '.join(heads)} for {dialect.name}{where}"]
    statements.append("BEGIN;")
    if schema is not None:
        quoted = dialect.identifier_preparer.quote_schema(schema)
        statements.append(f"CREATE SCHEMA IF NOT EXISTS {quoted};")
    for table in metadata.sorted_tables:
        history = PARTITIONED.get(table.name) if ours.partitioned_history else None
        statements.append(
            render(CreateTable(table if history is None else partitioned_table(history)))
        )
        for index in table_indexes(table, dialect.name):
            statements.append(render(CreateIndex(index)))
        if history is not None:
            statements.append(default_partition(history, dialect, schema))
    # The tenant every installation has, as the migration that brought tenants makes it.
    now = datetime.now(UTC).replace(microsecond=0)
    made = {"id": DEFAULT_TENANT, "version": 1, "created_at": now, "updated_at": now}
    statements.append(render(tenants.insert().values(**made), literal=True))
    # Stamped at head: the service counts the database as migrated, and a later
    # `chronoq migrate` applies only the revisions added after this one.
    version = _version_table(None)
    statements.append(render(CreateTable(version)))
    for head in heads:
        statements.append(render(version.insert().values(version_num=head), literal=True))
    statements.append("COMMIT;")
    return "\n\n".join(statements) + "\n"
