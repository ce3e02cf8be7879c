"""Create schedules and occurrences, with the partial claim index.

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-29 10:00:00
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql

from alembic import op

revision: str = "0001_initial"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONB = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
# MySQL and MariaDB: UUIDs as 32 hex characters whatever the server's version,
UUID = sa.Uuid().with_variant(sa.Uuid(native_uuid=False), "mysql", "mariadb")
# instants with microseconds, and the payload as text (its JSON type rewrites it).
INSTANT = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
PAYLOAD = sa.JSON().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
# MySQL tables compare text as the other databases do: case and accents count.
MYSQL_TABLE: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}


def _partial_index(
    name: str, table: str, columns: list[str], where: str, server: list[str]
) -> None:
    """A partial index on PostgreSQL and SQLite; MySQL has none, and gets `server`, which
    leads or ends with the column `where` tests."""
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        op.create_index(name, table, server)
    else:
        op.create_index(
            name, table, columns, postgresql_where=sa.text(where), sqlite_where=sa.text(where)
        )


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", UUID, nullable=False),
        sa.Column("name", sa.String(200), nullable=True),
        sa.Column("event_type", sa.String(200), nullable=False),
        # Plain JSON keeps the payload text exactly as given.
        sa.Column("payload", PAYLOAD, nullable=True),
        sa.Column("target", JSONB, nullable=False),
        sa.Column("target_type", sa.String(20), nullable=False),
        sa.Column("trigger", JSONB, nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("labels", JSONB, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("fire_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_fired_at", INSTANT, nullable=True),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("request_hash", sa.String(64), nullable=True),
        sa.Column("created_at", INSTANT, nullable=False),
        sa.Column("updated_at", INSTANT, nullable=False),
        sa.CheckConstraint(
            "status IN ('pending', 'paused', 'completed', 'cancelled', 'failed')",
            name=op.f("schedules_status_check"),
        ),
        sa.CheckConstraint("fire_count >= 0", name=op.f("schedules_fire_count_check")),
        sa.CheckConstraint("max_attempts >= 1", name=op.f("schedules_max_attempts_check")),
        sa.PrimaryKeyConstraint("id", name=op.f("schedules_pkey")),
        sa.UniqueConstraint("idempotency_key", name=op.f("schedules_idempotency_key_key")),
        sa.UniqueConstraint("name", name=op.f("schedules_name_key")),
        **MYSQL_TABLE,
    )
    op.create_table(
        "occurrences",
        sa.Column("occurrence_id", UUID, nullable=False),
        sa.Column("schedule_id", UUID, nullable=False),
        sa.Column("fire_at", INSTANT, nullable=False),
        sa.Column("available_at", INSTANT, nullable=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("origin", sa.String(20), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("lease_token", UUID, nullable=True),
        sa.Column("lease_owner", sa.String(100), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("delivered_at", INSTANT, nullable=True),
        sa.Column("dead_lettered_at", INSTANT, nullable=True),
        sa.Column("created_at", INSTANT, nullable=False),
        sa.Column("updated_at", INSTANT, nullable=False),
        sa.CheckConstraint(
            "origin IN ('schedule', 'trigger')", name=op.f("occurrences_origin_check")
        ),
        sa.CheckConstraint(
            "status <> 'dead_lettered' OR dead_lettered_at IS NOT NULL",
            name=op.f("occurrences_dead_lettered_at_check"),
        ),
        sa.CheckConstraint(
            "status <> 'delivered' OR delivered_at IS NOT NULL",
            name=op.f("occurrences_delivered_at_check"),
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'delivered', 'dead_lettered', 'cancelled')",
            name=op.f("occurrences_status_check"),
        ),
        sa.CheckConstraint("attempts >= 0", name=op.f("occurrences_attempts_check")),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["schedules.id"],
            name=op.f("occurrences_schedule_id_fkey"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("occurrence_id", name=op.f("occurrences_pkey")),
        **MYSQL_TABLE,
    )
    # The claim skips paused schedules through this tiny index, not a scan of schedules.
    _partial_index(
        "ix_schedules_paused", "schedules", ["id"], "status = 'paused'", ["status", "id"]
    )
    # The claim scans only pending rows, so its cost does not grow with history.
    _partial_index(
        "ix_occurrences_claim",
        "occurrences",
        ["available_at"],
        "status = 'pending'",
        ["status", "available_at"],
    )
    _partial_index(
        "ix_occurrences_pending_by_schedule",
        "occurrences",
        ["schedule_id", "fire_at"],
        "status = 'pending'",
        ["schedule_id", "status", "fire_at"],
    )
    _partial_index(
        "ix_occurrences_dead_letters",
        "occurrences",
        ["dead_lettered_at"],
        "status = 'dead_lettered'",
        ["status", "dead_lettered_at"],
    )
    op.create_index("ix_occurrences_schedule_id_fire_at", "occurrences", ["schedule_id", "fire_at"])


def downgrade() -> None:
    op.drop_table("occurrences")
    op.drop_table("schedules")
