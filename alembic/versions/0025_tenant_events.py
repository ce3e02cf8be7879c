"""Tenant events: `tenant_events`, the audit trail of each change of a tenant and of its keys
(created, updated, paused, resumed, deleted, key_created, key_revoked), written in the
change's own transaction. No foreign key holds it to `tenants`: a tenant's events outlive
it, its `deleted` last. Keyed by UUIDv7, which sorts by creation; a tenant's events are read
by `(tenant, id)`.

Revision ID: 0025_tenant_events
Revises: 0024_tenant_dispatch
Create Date: 2026-12-07 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op
from app.store.schema.types import UUID, UTCDateTime

revision: str = "0025_tenant_events"
down_revision: str | None = "0024_tenant_dispatch"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONB = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
KINDS = (
    "kind IN ('created', 'updated', 'paused', 'resumed', 'deleted', 'key_created', 'key_revoked')"
)
KEY_KINDS = "'key_created', 'key_revoked'"
KEY = (
    f"(kind IN ({KEY_KINDS}) AND key_id IS NOT NULL AND key_name IS NOT NULL)"
    f" OR (kind NOT IN ({KEY_KINDS}) AND key_id IS NULL AND key_name IS NULL)"
)


def upgrade() -> None:
    op.create_table(
        "tenant_events",
        sa.Column("id", UUID, nullable=False),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("actor", sa.String(128), nullable=True),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column("fields", JSONB, nullable=True),
        sa.Column("key_id", UUID, nullable=True),
        sa.Column("key_name", sa.String(64), nullable=True),
        sa.CheckConstraint(KINDS, name=op.f("tenant_events_kind_check")),
        sa.CheckConstraint(
            "version IS NULL OR version >= 1", name=op.f("tenant_events_version_check")
        ),
        sa.CheckConstraint(KEY, name=op.f("tenant_events_key_check")),
        sa.PrimaryKeyConstraint("id", name=op.f("tenant_events_pkey")),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    op.create_index("ix_tenant_events_tenant_id", "tenant_events", ["tenant", "id"])


def downgrade() -> None:
    op.drop_table("tenant_events")
