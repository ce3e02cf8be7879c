"""What a database's schema holds, read by SQLAlchemy's reflection, in the same terms on
every dialect: tables, columns, keys, indexes and check constraints by name."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tests.store.ports import Database

Catalog = dict[str, set[tuple[Any, ...]]]


def _affinity(type_: sa.types.TypeEngine[Any]) -> str:
    """The generic kind of a reflected type (String, Integer, DateTime, JSON, ...)."""
    generic = type_._type_affinity  # SQLAlchemy's own classification of types
    return (generic or type(type_)).__name__


def _spelled(type_: sa.types.TypeEngine[Any], dialect: sa.engine.Dialect) -> str:
    """The type as the dialect writes it, size and precision included (VARCHAR(200),
    DATETIME(6)): a narrower column or coarser instants in one build show here."""
    return str(type_.compile(dialect=dialect))


def _predicate(index: dict[str, Any]) -> str | None:
    """A partial index's WHERE clause as the dialect reflects it."""
    options = index.get("dialect_options", {})
    wheres = [str(value) for key, value in options.items() if key.endswith("_where")]
    return " ".join(wheres) or None


def _partitions(conn: Connection) -> set[str]:
    """The partitions of a day or of the history before partitions (PostgreSQL): the service
    makes and drops them as days pass (`app.store.schema.partitions`); the default ones are
    schema."""
    if conn.dialect.name != "postgresql":
        return set()
    found = conn.execute(
        sa.text(
            "SELECT relname FROM pg_class"
            " WHERE relispartition AND pg_get_expr(relpartbound, oid) <> 'DEFAULT'"
        )
    )
    return {str(name) for name in found.scalars()}


def _read(conn: Connection) -> Catalog:
    inspector = sa.inspect(conn)
    catalog: Catalog = {"tables": set(), "columns": set(), "keys": set(), "indexes": set()}
    catalog["checks"] = set()
    partitions = _partitions(conn)
    for table in inspector.get_table_names():
        if table in partitions:
            continue
        catalog["tables"].add((table,))
        for column in inspector.get_columns(table):
            catalog["columns"].add(
                (
                    table,
                    column["name"],
                    _affinity(column["type"]),
                    _spelled(column["type"], conn.dialect),
                    column["nullable"],
                    column.get("default"),
                )
            )
        primary = inspector.get_pk_constraint(table)
        catalog["keys"].add(
            (table, "primary", primary["name"], tuple(primary["constrained_columns"]))
        )
        for unique in inspector.get_unique_constraints(table):
            catalog["keys"].add((table, "unique", unique["name"], tuple(unique["column_names"])))
        for foreign in inspector.get_foreign_keys(table):
            catalog["keys"].add(
                (
                    table,
                    "foreign",
                    foreign["name"],
                    tuple(foreign["constrained_columns"]),
                    foreign["referred_table"],
                    tuple(foreign["referred_columns"]),
                    foreign.get("options", {}).get("ondelete"),
                )
            )
        for index in inspector.get_indexes(table):
            catalog["indexes"].add(
                (
                    table,
                    index["name"],
                    tuple(index["column_names"]),
                    bool(index["unique"]),
                    _predicate(dict(index)),
                )
            )
        for check in inspector.get_check_constraints(table):
            catalog["checks"].add((table, check["name"]))
    return catalog


async def read_catalog(database: Database) -> Catalog:
    async with database.engine.connect() as conn:
        return await conn.run_sync(_read)


def differences(built: Catalog, expected: Catalog) -> list[str]:
    """What `built` lacks or has beyond `expected`, part by part (empty: the same)."""
    found = []
    for part in expected:
        missing = sorted(expected[part] - built[part], key=str)
        extra = sorted(built[part] - expected[part], key=str)
        if missing:
            found.append(f"{part} missing: {missing}")
        if extra:
            found.append(f"{part} extra: {extra}")
    return found
