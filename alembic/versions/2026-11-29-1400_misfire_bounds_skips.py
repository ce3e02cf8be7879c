"""Misfire policies, bounds and the record of skipped ticks.

Schedules get their misfire settings, an optional cap on how many ticks fire, counters of
fired and skipped ticks and the instant a pause began. Occurrences may now be `skipped`
(with the reason, and how many ticks the entry stands for), and come from catch-ups and
backfills as well as the cadence and manual triggers.

Revision ID: 0003_misfire
Revises: 0002_jitter
Create Date: 2026-11-29 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic.operations import BatchOperations
from sqlalchemy.dialects import mysql

from alembic import op

revision: str = "0003_misfire"
down_revision: str | None = "0002_jitter"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_STATUSES = "status IN ('pending', 'delivered', 'dead_lettered', 'cancelled')"
NEW_STATUSES = "status IN ('pending', 'delivered', 'dead_lettered', 'cancelled', 'skipped')"
OLD_ORIGINS = "origin IN ('schedule', 'trigger')"
NEW_ORIGINS = "origin IN ('schedule', 'trigger', 'catchup', 'backfill')"
REASONS = "('misfire', 'paused', 'dst_gap')"


# A double everywhere: MySQL's FLOAT is single precision.
DOUBLE = sa.Float().with_variant(mysql.DOUBLE(), "mysql", "mariadb")

INSTANT = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def _drop_check(batch: BatchOperations, table: str, name: str) -> None:
    """MySQL 8 and MariaDB both take DROP CONSTRAINT (MariaDB has no DROP CHECK), and a
    script printed offline cannot tell which of them it is for. Run at once, before the
    block's other changes, which do not depend on it."""
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    else:
        batch.drop_constraint(op.f(name), type_="check")


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(
            sa.Column("misfire_policy", sa.String(20), server_default="fire_once", nullable=False)
        )
        batch.add_column(
            sa.Column("misfire_grace_seconds", DOUBLE, server_default="60", nullable=False)
        )
        batch.add_column(
            sa.Column("max_catchup", sa.Integer(), server_default="100", nullable=False)
        )
        batch.add_column(sa.Column("max_occurrences", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("tick_count", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(
            sa.Column("skipped_count", sa.Integer(), server_default="0", nullable=False)
        )
        batch.add_column(sa.Column("last_skip_reason", sa.String(20), nullable=True))
        batch.add_column(sa.Column("paused_at", INSTANT, nullable=True))
        # 0002 let the naming convention wrap its name a second time; it gets the
        # conventional one here.
        _drop_check(batch, "schedules", "schedules_schedules_jitter_seconds_check_check")
        batch.create_check_constraint(op.f("schedules_jitter_seconds_check"), "jitter_seconds >= 0")
        batch.create_check_constraint(
            op.f("schedules_misfire_policy_check"),
            "misfire_policy IN ('fire_once', 'skip', 'fire_all')",
        )
        batch.create_check_constraint(
            op.f("schedules_misfire_grace_seconds_check"), "misfire_grace_seconds >= 0"
        )
        batch.create_check_constraint(op.f("schedules_max_catchup_check"), "max_catchup >= 1")
        batch.create_check_constraint(
            op.f("schedules_max_occurrences_check"),
            "max_occurrences IS NULL OR max_occurrences >= 1",
        )
        batch.create_check_constraint(
            op.f("schedules_last_skip_reason_check"),
            f"last_skip_reason IS NULL OR last_skip_reason IN {REASONS}",
        )
    with op.batch_alter_table("occurrences") as batch:
        batch.add_column(sa.Column("skip_reason", sa.String(20), nullable=True))
        batch.add_column(
            sa.Column("skipped_count", sa.Integer(), server_default="0", nullable=False)
        )
        _drop_check(batch, "occurrences", "occurrences_status_check")
        batch.create_check_constraint(op.f("occurrences_status_check"), NEW_STATUSES)
        _drop_check(batch, "occurrences", "occurrences_origin_check")
        batch.create_check_constraint(op.f("occurrences_origin_check"), NEW_ORIGINS)
        batch.create_check_constraint(
            op.f("occurrences_skip_reason_check"),
            "(status = 'skipped') = (skip_reason IS NOT NULL)",
        )
        batch.create_check_constraint(
            op.f("occurrences_skip_reason_value_check"),
            f"skip_reason IS NULL OR skip_reason IN {REASONS}",
        )


def downgrade() -> None:
    op.execute("DELETE FROM occurrences WHERE status = 'skipped'")
    op.execute("UPDATE occurrences SET origin = 'schedule' WHERE origin <> 'trigger'")
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_constraint(op.f("occurrences_skip_reason_value_check"), type_="check")
        batch.drop_constraint(op.f("occurrences_skip_reason_check"), type_="check")
        batch.drop_constraint(op.f("occurrences_origin_check"), type_="check")
        batch.create_check_constraint(op.f("occurrences_origin_check"), OLD_ORIGINS)
        batch.drop_constraint(op.f("occurrences_status_check"), type_="check")
        batch.create_check_constraint(op.f("occurrences_status_check"), OLD_STATUSES)
        batch.drop_column("skipped_count")
        batch.drop_column("skip_reason")
    with op.batch_alter_table("schedules") as batch:
        for name in (
            "last_skip_reason",
            "max_occurrences",
            "max_catchup",
            "misfire_grace_seconds",
            "misfire_policy",
        ):
            batch.drop_constraint(op.f(f"schedules_{name}_check"), type_="check")
        batch.drop_constraint(op.f("schedules_jitter_seconds_check"), type_="check")
        batch.create_check_constraint(
            op.f("schedules_schedules_jitter_seconds_check_check"), "jitter_seconds >= 0"
        )
        for column in (
            "paused_at",
            "last_skip_reason",
            "skipped_count",
            "tick_count",
            "max_occurrences",
            "max_catchup",
            "misfire_grace_seconds",
            "misfire_policy",
        ):
            batch.drop_column(column)
