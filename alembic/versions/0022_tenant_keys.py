"""Tenant keys: `tenant_keys` (each key's SHA-256, never the key), and audit events and
schedules that name a tenant key as the actor (`tenant/name`, up to 128 characters).

Revision ID: 0022_tenant_keys
Revises: 0021_tenants
Create Date: 2026-12-06 16:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from app.store.schema.types import UUID, UTCDateTime

revision: str = "0022_tenant_keys"
down_revision: str | None = "0021_tenants"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_ACTOR, NEW_ACTOR = 64, 128
ACTORS = (("schedules", "created_by"), ("schedule_events", "actor"))


def _actors(old: int, new: int) -> None:
    for table, column in ACTORS:
        with op.batch_alter_table(table) as batch:
            batch.alter_column(
                column, existing_type=sa.String(old), type_=sa.String(new), existing_nullable=True
            )


def upgrade() -> None:
    op.create_table(
        "tenant_keys",
        sa.Column("id", UUID, nullable=False),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("role", sa.String(10), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=True),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
        sa.Column("last_used_at", UTCDateTime(), nullable=True),
        sa.CheckConstraint("role IN ('write', 'read')", name=op.f("tenant_keys_role_check")),
        sa.PrimaryKeyConstraint("id", name=op.f("tenant_keys_pkey")),
        sa.UniqueConstraint("digest", name=op.f("tenant_keys_digest_key")),
        sa.UniqueConstraint("tenant", "name", name=op.f("tenant_keys_tenant_name_key")),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
    )
    _actors(OLD_ACTOR, NEW_ACTOR)


def downgrade() -> None:
    _actors(NEW_ACTOR, OLD_ACTOR)
    op.drop_table("tenant_keys")
