"""Retention index: finished occurrences by the instant of their last change.

Pruning deletes delivered, cancelled and skipped occurrences whose `updated_at` is past
the retention period; this partial index lets it find them without scanning the history
it keeps.

On PostgreSQL the build blocks writes to `occurrences` while it scans the table. Where the
table is already large, create the same index beforehand with CREATE INDEX CONCURRENTLY
(same name, columns and predicate); this migration then leaves it as it is.

Revision ID: 0004_retention
Revises: 0003_misfire
Create Date: 2026-11-29 16:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0004_retention"
down_revision: str | None = "0003_misfire"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PRUNABLE = sa.text("status IN ('delivered', 'cancelled', 'skipped')")


def upgrade() -> None:
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        # No partial indexes: oldest first, with the status read inside the index.
        op.create_index(op.f("ix_occurrences_retention"), "occurrences", ["updated_at", "status"])
        return
    op.create_index(
        op.f("ix_occurrences_retention"),
        "occurrences",
        ["updated_at"],
        postgresql_where=PRUNABLE,
        sqlite_where=PRUNABLE,
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_occurrences_retention"), table_name="occurrences", if_exists=True)
