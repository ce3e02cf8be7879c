"""Schedule retention index: ended schedules (completed, cancelled, failed) by the instant of
their last change, so that retention finds those to delete without scanning the live ones.

On PostgreSQL the build blocks writes to `schedules` while it scans the table. Where the
table is already large, create the same index beforehand with CREATE INDEX CONCURRENTLY
(same name, columns and predicate); this migration then leaves it as it is.

Revision ID: 0015_schedule_retention
Revises: 0014_failure_callbacks
Create Date: 2026-12-04 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0015_schedule_retention"
down_revision: str | None = "0014_failure_callbacks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ENDED = sa.text("status IN ('completed', 'cancelled', 'failed')")


def upgrade() -> None:
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        # No partial indexes: oldest first, with the status read inside the index.
        op.create_index("ix_schedules_ended", "schedules", ["updated_at", "status"])
        return
    op.create_index(
        "ix_schedules_ended",
        "schedules",
        ["updated_at"],
        postgresql_where=ENDED,
        sqlite_where=ENDED,
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index("ix_schedules_ended", table_name="schedules", if_exists=True)
