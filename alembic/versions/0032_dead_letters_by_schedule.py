"""A schedule's dead letters by schedule (`ix_occurrences_dead_letters_by_schedule`,
partial): the settle's check of each one-shot it finishes for a dead-lettered firing is a
lookup however many dead letters another schedule holds, where the planner, expecting each
schedule to hold the average, scanned the table for each (PostgreSQL). MySQL has it in
`ix_occurrences_pending_by_schedule` already.

Revision ID: 0032_dead_letters_by_schedule
Revises: 0031_history_partitions
Create Date: 2026-12-12 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0032_dead_letters_by_schedule"
down_revision: str | None = "0031_history_partitions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_WHERE = "status = 'dead_lettered'"


def upgrade() -> None:
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        return
    op.create_index(
        "ix_occurrences_dead_letters_by_schedule",
        "occurrences",
        ["schedule_id"],
        postgresql_where=sa.text(_WHERE),
        sqlite_where=sa.text(_WHERE),
    )


def downgrade() -> None:
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        return
    op.drop_index("ix_occurrences_dead_letters_by_schedule", table_name="occurrences")
