"""Keys asleep: `flow_key_sleeps`, the flow keys whose rows the claim shelved because nothing
of them was due for a while, each with the earliest instant of what it shelved (`next_at`);
and `ix_occurrences_asleep`, by which the claim wakes such rows as their instant nears. With
them, walks of the keys visit only keys with work due soon, however many have work only
later.

Revision ID: 0026_key_sleeps
Revises: 0025_tenant_events
Create Date: 2026-12-08 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from app.store.schema.types import UTCDateTime

revision: str = "0026_key_sleeps"
down_revision: str | None = "0025_tenant_events"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ASLEEP = "status = 'pending' AND flow_key IS NOT NULL AND shelved"


def _mysql() -> bool:
    return op.get_context().dialect.name in ("mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "flow_key_sleeps",
        sa.Column("key", sa.String(192), nullable=False),
        sa.Column("next_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("flow_key_sleeps_pkey")),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_index("ix_flow_key_sleeps_next_at", "flow_key_sleeps", ["next_at"])
    if not _mysql():  # MySQL: the claim index serves
        op.create_index(
            "ix_occurrences_asleep",
            "occurrences",
            ["flow_key", "available_at"],
            postgresql_where=sa.text(ASLEEP),
            sqlite_where=sa.text(ASLEEP),
        )


def downgrade() -> None:
    # What slept is awake again: every walk of the keys visits it, as before.
    op.execute(
        "UPDATE occurrences SET shelved = false WHERE shelved AND flow_key IN"
        " (SELECT flow_key_sleeps." + ("`key`" if _mysql() else '"key"') + " FROM flow_key_sleeps)"
    )
    if not _mysql():
        op.drop_index("ix_occurrences_asleep", table_name="occurrences")
    op.drop_table("flow_key_sleeps")
