"""A lease records when its attempt may start, and whether it was claimed ahead.

`leased_at` is written only by the claim: the instant its attempt may start (the claim's
own instant, or for an occurrence claimed ahead of its due instant, that instant). The
attempt log takes a lost attempt's start from it, not from `updated_at`, which a pause or
a resume rewrites. `lease_ahead` is true from a claim ahead until its replica starts the
attempt: a lease lost while it is still true was never started, so its attempt is not
charged.

Revision ID: 0009_lease_start
Revises: 0008_auto_pause
Create Date: 2026-12-01 16:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from alembic import op

revision: str = "0009_lease_start"
down_revision: str | None = "0008_auto_pause"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSTANT = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("occurrences") as batch:
        batch.add_column(sa.Column("leased_at", INSTANT, nullable=True))
        batch.add_column(
            sa.Column("lease_ahead", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    # A lease taken before this revision started when it was claimed: its last change.
    op.execute("UPDATE occurrences SET leased_at = updated_at WHERE lease_token IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_column("lease_ahead")
        batch.drop_column("leased_at")
