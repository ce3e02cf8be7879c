"""Occurrences remember their instant while held, and when their first attempt started.

`held_until`: pausing a schedule makes its pending occurrences unclaimable by clearing
`available_at`; the instant each was due (its jittered fire instant, its retry instant or
its lease's end) is kept here, so that resume gives each back its own instant instead of
making all of them due at once.

`first_attempt_at`: when the occurrence was first claimed. A schedule's `fire_count` and
its cadence planning (the next tick, catch-ups, skipped ticks) happen once per occurrence,
on the claim that sets it; a replay resets `attempts` but not this, so a replayed
occurrence is neither counted again nor planned again.

Revision ID: 0005_held_first_attempt
Revises: 0004_retention
Create Date: 2026-12-01 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from alembic import op

revision: str = "0005_held_first_attempt"
down_revision: str | None = "0004_retention"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


INSTANT = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("occurrences") as batch:
        batch.add_column(sa.Column("held_until", INSTANT, nullable=True))
        batch.add_column(sa.Column("first_attempt_at", INSTANT, nullable=True))
    # Every occurrence that has been attempted counts as fired already; the instant of its
    # last change is the best record of it that older rows have.
    op.execute(
        "UPDATE occurrences SET first_attempt_at = updated_at "
        "WHERE attempts > 0 OR status IN ('delivered', 'dead_lettered')"
    )


def downgrade() -> None:
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_column("first_attempt_at")
        batch.drop_column("held_until")
