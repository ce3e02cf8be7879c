"""Failure callbacks: `schedules.on_failure` (a target, JSON, NULL for none), and
occurrences of origin `callback`, with the occurrence each reports (`callback_of`) and the
body it delivers (`body`).

Revision ID: 0014_failure_callbacks
Revises: 0013_claim_first_attempts
Create Date: 2026-12-03 16:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic.operations import BatchOperations
from sqlalchemy.dialects import mysql, postgresql

from alembic import op

revision: str = "0014_failure_callbacks"
down_revision: str | None = "0013_claim_first_attempts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONB = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
UUID = sa.Uuid().with_variant(sa.Uuid(native_uuid=False), "mysql", "mariadb")
LONG_TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
OLD_ORIGINS = "origin IN ('schedule', 'trigger', 'catchup', 'backfill')"
NEW_ORIGINS = "origin IN ('schedule', 'trigger', 'catchup', 'backfill', 'callback')"
ORIGIN_CHECK = "occurrences_origin_check"


def _replace_check(batch: BatchOperations, condition: str) -> None:
    """MySQL 8 and MariaDB both take DROP CONSTRAINT (MariaDB has no DROP CHECK)."""
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        op.execute(f"ALTER TABLE occurrences DROP CONSTRAINT {ORIGIN_CHECK}")
    else:
        batch.drop_constraint(op.f(ORIGIN_CHECK), type_="check")
    batch.create_check_constraint(op.f(ORIGIN_CHECK), condition)


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("on_failure", JSONB, nullable=True))
    with op.batch_alter_table("occurrences") as batch:
        batch.add_column(sa.Column("callback_of", UUID, nullable=True))
        batch.add_column(sa.Column("body", LONG_TEXT, nullable=True))
        _replace_check(batch, NEW_ORIGINS)


def downgrade() -> None:
    op.execute("DELETE FROM occurrences WHERE origin = 'callback'")
    with op.batch_alter_table("occurrences") as batch:
        _replace_check(batch, OLD_ORIGINS)
        batch.drop_column("body")
        batch.drop_column("callback_of")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("on_failure")
