"""Each attempt carries what the activity roll-up groups it by: its occurrence's instant
(`attempts.fire_at`), its schedule's tenant (`attempts.tenant`) and its occurrence's flow
key (`attempts.flow_key`), written by the settle that logs it. The roll-up then reads the
log's own rows, where it looked up each attempt's occurrence and schedule by key: at a
million occurrences, 140,000 attempts of two minutes took 1.4 million buffer reads and
most of a second of both cores, every round.

The rows already logged keep NULL in all three, as do the rare attempts a claim or a stop
logs; the roll-up reads those from their occurrence and schedule as before.

Revision ID: 0033_attempt_rollup_columns
Revises: 0032_dead_letters_by_schedule
Create Date: 2026-12-13 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from app.store.schema.types import UTCDateTime

revision: str = "0033_attempt_rollup_columns"
down_revision: str | None = "0032_dead_letters_by_schedule"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable columns with no default: no server rewrites the table to add them, and on
    # PostgreSQL each day partition gains them with the partitioned table.
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("fire_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("tenant", sa.String(63), nullable=True))
        batch.add_column(sa.Column("flow_key", sa.String(192), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("flow_key")
        batch.drop_column("tenant")
        batch.drop_column("fire_at")
