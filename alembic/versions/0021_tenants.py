"""Tenants: the `tenants` table with its `default` row, `schedules.tenant` (every existing
schedule, and all it holds, in `default`), names and Idempotency-Keys unique per tenant, and
flow keys named by their tenant in the store (`default/<key>` for every existing one, in
`schedules.flow_key`, `occurrences.flow_key` and `flow_keys.key`, widened to hold a tenant
id before the name; `app.domain.tenants.stored_key`).

On SQLite the tables are rebuilt (that is how SQLite alters a constraint or a column's
type), which must run with foreign keys off, or dropping the old `schedules` would cascade to
its occurrences: the dialect's migration session turns them off (`SQLite.migrating`), and
this revision refuses to run otherwise.

Revision ID: 0021_tenants
Revises: 0020_shelved_rows
Create Date: 2026-12-06 16:40:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa

from alembic import op
from app.store.schema.types import UTCDateTime

revision: str = "0021_tenants"
down_revision: str | None = "0020_shelved_rows"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DEFAULT = "default"
NOT_DEFAULT = f"tenant <> '{DEFAULT}'"
OLD_KEY, NEW_KEY = 128, 192
# Each flow key column, by table.
KEY_COLUMNS = (("schedules", "flow_key", True), ("occurrences", "flow_key", True))
KEY_TABLE = ("flow_keys", "key", False)


def _sqlite_foreign_keys_off() -> None:
    if op.get_context().dialect.name != "sqlite" or op.get_context().as_sql:
        return
    if op.get_bind().exec_driver_sql("PRAGMA foreign_keys").scalar():
        raise RuntimeError(
            "rebuilding tables on SQLite needs foreign keys off, or their rows would cascade "
            "away; run the migration with `chronoq migrate`"
        )


def _mysql() -> bool:
    return op.get_context().dialect.name in ("mysql", "mariadb")


def _quoted(column: str) -> str:
    return f"`{column}`" if _mysql() else f'"{column}"'


def _widen(table: str, column: str, nullable: bool, old: int, new: int) -> None:
    with op.batch_alter_table(table) as batch:
        batch.alter_column(
            column,
            existing_type=sa.String(old),
            type_=sa.String(new),
            existing_nullable=nullable,
        )


def _partial_unique(name: str, column: str) -> None:
    if _mysql():
        op.create_index(name, "schedules", ["tenant", column], unique=True)
        return
    where = sa.text(f"{column} IS NOT NULL")
    op.create_index(
        name,
        "schedules",
        ["tenant", column],
        unique=True,
        postgresql_where=where,
        sqlite_where=where,
    )


def _key_columns() -> tuple[tuple[str, str, bool], ...]:
    return (*KEY_COLUMNS, KEY_TABLE)


def upgrade() -> None:
    _sqlite_foreign_keys_off()
    tenants = op.create_table(
        "tenants",
        sa.Column("id", sa.String(63), nullable=False),
        sa.Column("display_name", sa.String(200), nullable=True),
        sa.Column("version", sa.Integer(), server_default="1", nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("version >= 1", name=op.f("tenants_version_check")),
        sa.PrimaryKeyConstraint("id", name=op.f("tenants_pkey")),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    now = datetime.now(UTC)
    op.bulk_insert(tenants, [{"id": DEFAULT, "version": 1, "created_at": now, "updated_at": now}])

    # A column with a constant default: no server rewrites the table to add it.
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("tenant", sa.String(63), server_default=DEFAULT, nullable=False))
        batch.drop_constraint(op.f("schedules_name_key"), type_="unique")
        batch.drop_constraint(op.f("schedules_idempotency_key_key"), type_="unique")
    # Names and Idempotency-Keys unique per tenant, indexing only the schedules that have
    # one (MySQL: every row; its unique indexes let NULLs repeat).
    for column in ("name", "idempotency_key"):
        _partial_unique(f"ix_schedules_{column}", column)

    # Another tenant's list, newest first: the default tenant's rows are none of it (MySQL,
    # without partial indexes: every row).
    if _mysql():
        op.create_index("ix_schedules_tenant_id", "schedules", ["tenant", "id"])
    else:
        op.create_index(
            "ix_schedules_tenant_id",
            "schedules",
            ["tenant", "id"],
            postgresql_where=sa.text(NOT_DEFAULT),
            sqlite_where=sa.text(NOT_DEFAULT),
        )
    for table, column, nullable in _key_columns():
        _widen(table, column, nullable, OLD_KEY, NEW_KEY)
        where = f" WHERE {column} IS NOT NULL" if nullable else ""
        quoted = _quoted(column)
        prefixed = f"CONCAT('{DEFAULT}/', {quoted})" if _mysql() else f"'{DEFAULT}/' || {quoted}"
        op.execute(f"UPDATE {table} SET {quoted} = {prefixed}{where}")
    if op.get_context().dialect.name == "sqlite" and not op.get_context().as_sql:
        broken = op.get_bind().exec_driver_sql("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise RuntimeError(f"foreign keys broken by the rebuild: {broken[:5]}")


def downgrade() -> None:
    _sqlite_foreign_keys_off()
    others = op.get_bind().execute(
        sa.text("SELECT count(*) FROM schedules WHERE tenant <> :d"), {"d": DEFAULT}
    )
    if others.scalar():
        raise RuntimeError("schedules of tenants other than default would lose their tenant")
    start = len(DEFAULT) + 2  # 1-based, after "default/"
    for table, column, nullable in _key_columns():
        quoted = _quoted(column)
        where = f" WHERE {column} IS NOT NULL" if nullable else ""
        op.execute(f"UPDATE {table} SET {quoted} = substr({quoted}, {start}){where}")
        _widen(table, column, nullable, NEW_KEY, OLD_KEY)
    op.drop_index("ix_schedules_tenant_id", table_name="schedules")
    op.drop_index("ix_schedules_idempotency_key", table_name="schedules")
    op.drop_index("ix_schedules_name", table_name="schedules")
    with op.batch_alter_table("schedules") as batch:
        batch.create_unique_constraint(op.f("schedules_name_key"), ["name"])
        batch.create_unique_constraint(op.f("schedules_idempotency_key_key"), ["idempotency_key"])
        batch.drop_column("tenant")
    op.drop_table("tenants")
