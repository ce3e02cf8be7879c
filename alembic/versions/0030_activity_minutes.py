"""Activity by the minute: `activity_minutes`, the attempt log's deliveries, failures,
dead letters and lateness per minute, of the fleet and of each tenant, endpoint and flow
key, rolled up by the delivery loops and read by the charts (`GET /v1/activity`).

Revision ID: 0030_activity_minutes
Revises: 0029_no_parent_index
Create Date: 2026-12-11 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from app.store.schema.types import JSONType, UTCDateTime

revision: str = "0030_activity_minutes"
down_revision: str | None = "0029_no_parent_index"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MYSQL_TABLE = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}


def upgrade() -> None:
    op.create_table(
        "activity_minutes",
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("subject", sa.String(192), nullable=False),
        sa.Column("minute", UTCDateTime(), nullable=False),
        sa.Column("delivered", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("dead_lettered", sa.Integer(), nullable=False),
        sa.Column("lateness", JSONType, nullable=False),
        sa.Column("rolled_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "subject", "minute", name=op.f("activity_minutes_pkey")),
        sa.CheckConstraint(
            "scope IN ('fleet', 'tenant', 'endpoint', 'flow_key')",
            name=op.f("activity_minutes_scope_check"),
        ),
        **_MYSQL_TABLE,
    )
    op.create_index("ix_activity_minutes_minute", "activity_minutes", ["minute"])


def downgrade() -> None:
    op.drop_index("ix_activity_minutes_minute", table_name="activity_minutes")
    op.drop_table("activity_minutes")
