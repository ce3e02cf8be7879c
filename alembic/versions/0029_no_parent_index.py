"""A fan-out's deliveries are found by their schedule and instant (those of the topic's
occurrence they deliver, `ix_occurrences_schedule_id_fire_at`), no longer by an index of
their parent, which each of a delivery's writes (its insert, its claim, its start mark, its
settle) kept up to date.

Revision ID: 0029_no_parent_index
Revises: 0028_topics
Create Date: 2026-12-10 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0029_no_parent_index"
down_revision: str | None = "0028_topics"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("ix_occurrences_parent", table_name="occurrences")


def downgrade() -> None:
    if op.get_bind().dialect.name in ("mysql", "mariadb"):
        op.create_index("ix_occurrences_parent", "occurrences", ["parent_id"])
    else:
        op.create_index(
            "ix_occurrences_parent",
            "occurrences",
            ["parent_id"],
            postgresql_where=sa.text("parent_id IS NOT NULL"),
            sqlite_where=sa.text("parent_id IS NOT NULL"),
        )
