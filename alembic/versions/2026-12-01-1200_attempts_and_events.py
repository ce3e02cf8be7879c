"""The attempt log and the schedules' audit events.

`attempts`: one row per attempt of an occurrence, written with its settlement (and for an
attempt lost with its replica, by the claim that takes the occurrence again); deleted with
its occurrence. `schedule_events`: one row per change in a schedule's life, written in the
change's own transaction; deleted with its schedule. Both are keyed by UUIDv7, which sorts
by creation.

Revision ID: 0007_attempts_events
Revises: 0006_version_created_by
Create Date: 2026-12-01 12:00:00
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql

from alembic import op

revision: str = "0007_attempts_events"
down_revision: str | None = "0006_version_created_by"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UUID = sa.Uuid().with_variant(sa.Uuid(native_uuid=False), "mysql", "mariadb")
INSTANT = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
JSONB = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
MYSQL_TABLE: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}
OUTCOMES = "outcome IN ('delivered', 'retry', 'dead_lettered', 'lease_expired')"
KINDS = (
    "kind IN ('created', 'updated', 'paused', 'resumed', 'triggered', 'cancelled', "
    "'backfilled', 'completed', 'failed', 'auto_paused', 'dead_letter_replayed', "
    "'dead_letter_discarded')"
)


def upgrade() -> None:
    op.create_table(
        "attempts",
        sa.Column("id", UUID, nullable=False),
        sa.Column("occurrence_id", UUID, nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("started_at", INSTANT, nullable=False),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(20), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("response_excerpt", sa.Text(), nullable=True),
        sa.Column("replica", sa.String(100), nullable=True),
        sa.CheckConstraint(OUTCOMES, name=op.f("attempts_outcome_check")),
        sa.CheckConstraint("attempt >= 1", name=op.f("attempts_attempt_check")),
        sa.CheckConstraint("duration_ms >= 0", name=op.f("attempts_duration_ms_check")),
        sa.ForeignKeyConstraint(
            ["occurrence_id"],
            ["occurrences.occurrence_id"],
            name=op.f("attempts_occurrence_id_fkey"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("attempts_pkey")),
        **MYSQL_TABLE,
    )
    op.create_index(
        "ix_attempts_occurrence_id_started_at", "attempts", ["occurrence_id", "started_at"]
    )
    op.create_table(
        "schedule_events",
        sa.Column("id", UUID, nullable=False),
        sa.Column("schedule_id", UUID, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("at", INSTANT, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("actor", sa.String(64), nullable=True),
        sa.Column("fields", JSONB, nullable=True),
        sa.CheckConstraint(KINDS, name=op.f("schedule_events_kind_check")),
        sa.CheckConstraint("version >= 1", name=op.f("schedule_events_version_check")),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["schedules.id"],
            name=op.f("schedule_events_schedule_id_fkey"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("schedule_events_pkey")),
        **MYSQL_TABLE,
    )
    op.create_index("ix_schedule_events_schedule_id_id", "schedule_events", ["schedule_id", "id"])


def downgrade() -> None:
    op.drop_table("schedule_events")
    op.drop_table("attempts")
