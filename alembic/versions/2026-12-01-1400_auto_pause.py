"""Schedules may pause themselves after dead letters in a row.

`pause_after_failures` (NULL: off, else 1-1000) is the threshold, `consecutive_failures` the
occurrences dead-lettered in a row (a delivery sets it back to 0), and `pause_reason` why a
paused schedule is paused: "manual" (API, CLI) or "failures". Schedules paused before this
revision were paused by hand.

Revision ID: 0008_auto_pause
Revises: 0007_attempts_events
Create Date: 2026-12-01 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0008_auto_pause"
down_revision: str | None = "0007_attempts_events"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("pause_after_failures", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("pause_reason", sa.String(20), nullable=True))
        batch.add_column(
            sa.Column("consecutive_failures", sa.Integer(), server_default="0", nullable=False)
        )
        batch.create_check_constraint(
            op.f("schedules_pause_after_failures_check"),
            "pause_after_failures IS NULL OR pause_after_failures BETWEEN 1 AND 1000",
        )
        batch.create_check_constraint(
            op.f("schedules_pause_reason_check"),
            "pause_reason IS NULL OR pause_reason IN ('manual', 'failures')",
        )
        batch.create_check_constraint(
            op.f("schedules_consecutive_failures_check"), "consecutive_failures >= 0"
        )
    op.execute("UPDATE schedules SET pause_reason = 'manual' WHERE status = 'paused'")


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_constraint(op.f("schedules_consecutive_failures_check"), type_="check")
        batch.drop_constraint(op.f("schedules_pause_reason_check"), type_="check")
        batch.drop_constraint(op.f("schedules_pause_after_failures_check"), type_="check")
        batch.drop_column("consecutive_failures")
        batch.drop_column("pause_reason")
        batch.drop_column("pause_after_failures")
