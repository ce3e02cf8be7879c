"""Failing schedules index: the schedules with occurrences dead-lettered in a row, so that a
list's `failing` filter reads just them instead of every schedule.

The index holds only failing schedules on PostgreSQL and SQLite, so it is small; on
PostgreSQL its build still blocks writes to `schedules` while it scans the table. Where the
table is already large, create the same index beforehand with CREATE INDEX CONCURRENTLY
(same name, column and predicate); this migration then leaves it as it is.

Revision ID: 0016_failing
Revises: 0015_schedule_retention
Create Date: 2026-12-05 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0016_failing"
down_revision: str | None = "0015_schedule_retention"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FAILING = sa.text("consecutive_failures > 0")


def upgrade() -> None:
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        # No partial indexes: by failures in a row, the failing ones a range of it.
        op.create_index("ix_schedules_failing", "schedules", ["consecutive_failures", "id"])
        return
    op.create_index(
        "ix_schedules_failing",
        "schedules",
        ["id"],
        postgresql_where=FAILING,
        sqlite_where=FAILING,
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index("ix_schedules_failing", table_name="schedules", if_exists=True)
