"""Flow keys: a schedule's key, copied onto its occurrences, and the keys' limits.

`schedules.flow_key` and `occurrences.flow_key` name the key whose limits the deliveries
share; `flow_keys` holds each key's limits, token bucket and back-off. The claim index of
unkeyed rows becomes partial on `flow_key IS NULL` (on MySQL the key is its second column),
so rows held back on a key cost the unkeyed claim nothing; keyed rows get indexes of their
own, by key and by instant.

Revision ID: 0010_flow_keys
Revises: 0009_lease_start
Create Date: 2026-12-02 10:00:00
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from alembic import op

revision: str = "0010_flow_keys"
down_revision: str | None = "0009_lease_start"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSTANT = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
DOUBLE = sa.Float().with_variant(mysql.DOUBLE(), "mysql", "mariadb")
MYSQL_TABLE: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}
UNKEYED = "status = 'pending' AND flow_key IS NULL"
KEYED = "status = 'pending' AND flow_key IS NOT NULL"
PENDING = "status = 'pending'"


def _mysql() -> bool:
    return op.get_context().dialect.name in ("mysql", "mariadb")


def _partial(name: str, table: str, columns: list[str], where: str) -> None:
    op.create_index(
        name, table, columns, postgresql_where=sa.text(where), sqlite_where=sa.text(where)
    )


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("flow_key", sa.String(128), nullable=True))
    with op.batch_alter_table("occurrences") as batch:
        batch.add_column(sa.Column("flow_key", sa.String(128), nullable=True))
    op.create_table(
        "flow_keys",
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("rate", sa.Integer(), nullable=True),
        sa.Column("period_seconds", DOUBLE, server_default="1", nullable=False),
        sa.Column("burst", sa.Integer(), nullable=True),
        sa.Column("parallelism", sa.Integer(), nullable=True),
        sa.Column("ordering", sa.String(10), server_default="none", nullable=False),
        sa.Column("paused", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("limits_set", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("version", sa.Integer(), server_default="1", nullable=False),
        sa.Column("tokens", DOUBLE, nullable=True),
        sa.Column("refilled_at", INSTANT, nullable=True),
        sa.Column("backoff_until", INSTANT, nullable=True),
        sa.Column("created_at", INSTANT, nullable=False),
        sa.Column("updated_at", INSTANT, nullable=False),
        sa.CheckConstraint("rate IS NULL OR rate >= 1", name=op.f("flow_keys_rate_check")),
        sa.CheckConstraint("period_seconds > 0", name=op.f("flow_keys_period_seconds_check")),
        sa.CheckConstraint("burst IS NULL OR burst >= 1", name=op.f("flow_keys_burst_check")),
        sa.CheckConstraint(
            "parallelism IS NULL OR parallelism >= 1", name=op.f("flow_keys_parallelism_check")
        ),
        sa.CheckConstraint("ordering IN ('none', 'fifo')", name=op.f("flow_keys_ordering_check")),
        sa.CheckConstraint("version >= 1", name=op.f("flow_keys_version_check")),
        sa.PrimaryKeyConstraint("key", name=op.f("flow_keys_pkey")),
        **MYSQL_TABLE,
    )
    op.drop_index("ix_occurrences_claim", table_name="occurrences")
    if _mysql():
        op.create_index(
            "ix_occurrences_claim", "occurrences", ["status", "flow_key", "available_at"]
        )
        op.create_index(
            "ix_occurrences_flow_due", "occurrences", ["status", "available_at", "flow_key"]
        )
        op.create_index("ix_schedules_flow_key", "schedules", ["flow_key"])
        return
    _partial("ix_occurrences_claim", "occurrences", ["available_at"], UNKEYED)
    _partial("ix_occurrences_flow", "occurrences", ["flow_key", "available_at"], KEYED)
    _partial("ix_occurrences_flow_due", "occurrences", ["available_at"], KEYED)
    _partial("ix_schedules_flow_key", "schedules", ["flow_key"], "flow_key IS NOT NULL")


def downgrade() -> None:
    op.drop_index("ix_schedules_flow_key", table_name="schedules")
    op.drop_index("ix_occurrences_flow_due", table_name="occurrences")
    op.drop_index("ix_occurrences_claim", table_name="occurrences")
    if _mysql():
        op.create_index("ix_occurrences_claim", "occurrences", ["status", "available_at"])
    else:
        op.drop_index("ix_occurrences_flow", table_name="occurrences")
        _partial("ix_occurrences_claim", "occurrences", ["available_at"], PENDING)
    op.drop_table("flow_keys")
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_column("flow_key")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("flow_key")
