"""Tenant quotas: `max_schedules` and `max_creates_per_minute` on `tenants` with the creates
bucket, and `ix_schedules_live`, a tenant's live schedules (but the default tenant's), which
a create counts up to the quota.

Revision ID: 0023_tenant_quotas
Revises: 0022_tenant_keys
Create Date: 2026-12-06 17:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from app.store.schema.types import DOUBLE, UTCDateTime

revision: str = "0023_tenant_quotas"
down_revision: str | None = "0022_tenant_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIVE = "status IN ('pending', 'paused') AND tenant <> 'default'"


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("max_schedules", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("max_creates_per_minute", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("create_tokens", DOUBLE, nullable=True))
        batch.add_column(sa.Column("create_refilled_at", UTCDateTime(), nullable=True))
        batch.create_check_constraint(
            op.f("tenants_max_schedules_check"), "max_schedules IS NULL OR max_schedules >= 1"
        )
        batch.create_check_constraint(
            op.f("tenants_max_creates_per_minute_check"),
            "max_creates_per_minute IS NULL OR max_creates_per_minute >= 1",
        )
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        op.create_index("ix_schedules_live", "schedules", ["tenant", "status"])
    else:
        op.create_index(
            "ix_schedules_live",
            "schedules",
            ["tenant"],
            postgresql_where=sa.text(LIVE),
            sqlite_where=sa.text(LIVE),
        )


def downgrade() -> None:
    op.drop_index("ix_schedules_live", table_name="schedules")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_constraint(op.f("tenants_max_creates_per_minute_check"), type_="check")
        batch.drop_constraint(op.f("tenants_max_schedules_check"), type_="check")
        batch.drop_column("create_refilled_at")
        batch.drop_column("create_tokens")
        batch.drop_column("max_creates_per_minute")
        batch.drop_column("max_schedules")
