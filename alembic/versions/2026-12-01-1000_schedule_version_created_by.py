"""Schedules carry a version for optimistic concurrency, and the name of who created them.

`version` is 1 at create and grows by one with every change a client or an operator makes
(PATCH, pause, resume, cancel, trigger, backfill); deliveries leave it alone. `created_by`
is the name of the API key that created the schedule (`cli` from the operator CLI, NULL
when no keys are set). Existing schedules start at version 1, creator unknown.

Revision ID: 0006_version_created_by
Revises: 0005_held_first_attempt
Create Date: 2026-12-01 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0006_version_created_by"
down_revision: str | None = "0005_held_first_attempt"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("version", sa.Integer(), server_default="1", nullable=False))
        batch.add_column(sa.Column("created_by", sa.String(64), nullable=True))
        batch.create_check_constraint(op.f("schedules_version_check"), "version >= 1")


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_constraint(op.f("schedules_version_check"), type_="check")
        batch.drop_column("created_by")
        batch.drop_column("version")
