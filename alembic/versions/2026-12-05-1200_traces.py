"""Traces: the W3C `traceparent` of the request that created a schedule
(`schedules.traceparent`, NULL when it carried none), sent on every delivery of its
occurrences, and the trace id of each attempt (`attempts.trace_id`, NULL when none).

Revision ID: 0017_traces
Revises: 0016_failing
Create Date: 2026-12-05 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0017_traces"
down_revision: str | None = "0016_failing"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable columns with no default: no server rewrites the table to add them.
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("traceparent", sa.String(55), nullable=True))
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("trace_id", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("trace_id")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("traceparent")
