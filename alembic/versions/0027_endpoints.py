"""Endpoints: `endpoints` (a tenant's reusable webhook destinations), `endpoint_secrets`
(their signing secrets, each live until it expires), `endpoint_events` (their trail), the
circuit breaker's columns on `flow_keys`, where each endpoint's key holds its limits,
`attempts.endpoint_id`, by which an endpoint's recent attempts are read; and operator events:
`tenants.events_target` and `operator_events`, the events waiting to be told.

Revision ID: 0027_endpoints
Revises: 0026_key_sleeps
Create Date: 2026-12-09 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from app.store.schema.types import DOUBLE, LONG_TEXT, UUID, JSONType, UTCDateTime

revision: str = "0027_endpoints"
down_revision: str | None = "0026_key_sleeps"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MYSQL_TABLE = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}
_EVENT_KINDS = (
    "created",
    "updated",
    "deleted",
    "secret_rotated",
    "opened",
    "reopened",
    "recovered",
    "disabled",
    "enabled",
)


def _mysql() -> bool:
    return op.get_context().dialect.name in ("mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("flow_keys") as batch:
        batch.add_column(sa.Column("circuit", sa.String(10), nullable=True))
        batch.add_column(
            sa.Column("failures_in_a_row", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("circuit_changed_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("circuit_opened_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("circuit_cooldown", DOUBLE, nullable=True))
        batch.create_check_constraint(
            op.f("flow_keys_circuit_check"), "circuit IS NULL OR circuit IN ('open', 'disabled')"
        )
    op.create_table(
        "endpoints",
        sa.Column("id", UUID, nullable=False),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("name", sa.String(200), nullable=True),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("method", sa.String(10), nullable=False),
        sa.Column("headers", JSONType, nullable=False),
        sa.Column("timeout_seconds", DOUBLE, nullable=False),
        sa.Column("description", sa.String(1000), nullable=True),
        sa.Column("failure_threshold", sa.Integer(), nullable=False),
        sa.Column("cooldown_seconds", DOUBLE, nullable=False),
        sa.Column("max_cooldown_seconds", DOUBLE, nullable=False),
        sa.Column("disable_after_seconds", DOUBLE, nullable=True),
        sa.Column("version", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("created_by", sa.String(128), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("endpoints_pkey")),
        sa.CheckConstraint("version >= 1", name=op.f("endpoints_version_check")),
        sa.CheckConstraint(
            "failure_threshold >= 1", name=op.f("endpoints_failure_threshold_check")
        ),
        sa.CheckConstraint("cooldown_seconds > 0", name=op.f("endpoints_cooldown_seconds_check")),
        sa.CheckConstraint(
            "max_cooldown_seconds >= cooldown_seconds", name=op.f("endpoints_max_cooldown_check")
        ),
        **_MYSQL_TABLE,
    )
    op.create_index("ix_endpoints_tenant_id", "endpoints", ["tenant", "id"])
    if _mysql():
        op.create_index("ix_endpoints_name", "endpoints", ["tenant", "name"], unique=True)
    else:
        op.create_index(
            "ix_endpoints_name",
            "endpoints",
            ["tenant", "name"],
            unique=True,
            postgresql_where=sa.text("name IS NOT NULL"),
            sqlite_where=sa.text("name IS NOT NULL"),
        )
    op.create_table(
        "endpoint_secrets",
        sa.Column("id", UUID, nullable=False),
        sa.Column("endpoint_id", UUID, nullable=False),
        sa.Column("secret", sa.String(200), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("endpoint_secrets_pkey")),
        sa.ForeignKeyConstraint(
            ["endpoint_id"],
            ["endpoints.id"],
            name=op.f("endpoint_secrets_endpoint_id_fkey"),
            ondelete="CASCADE",
        ),
        **_MYSQL_TABLE,
    )
    op.create_index("ix_endpoint_secrets_endpoint_id_id", "endpoint_secrets", ["endpoint_id", "id"])
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("endpoint_id", UUID, nullable=True))
    if _mysql():
        op.create_index("ix_attempts_endpoint", "attempts", ["endpoint_id", "started_at"])
    else:
        op.create_index(
            "ix_attempts_endpoint",
            "attempts",
            ["endpoint_id", "started_at"],
            postgresql_where=sa.text("endpoint_id IS NOT NULL"),
            sqlite_where=sa.text("endpoint_id IS NOT NULL"),
        )
    kinds = ", ".join(f"'{kind}'" for kind in _EVENT_KINDS)
    op.create_table(
        "endpoint_events",
        sa.Column("id", UUID, nullable=False),
        sa.Column("endpoint_id", UUID, nullable=False),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("actor", sa.String(128), nullable=True),
        sa.Column("detail", JSONType, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("endpoint_events_pkey")),
        sa.CheckConstraint(f"kind IN ({kinds})", name=op.f("endpoint_events_kind_check")),
        **_MYSQL_TABLE,
    )
    op.create_index("ix_endpoint_events_endpoint_id_id", "endpoint_events", ["endpoint_id", "id"])
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("events_target", JSONType, nullable=True))
    op.create_table(
        "operator_events",
        sa.Column("id", UUID, nullable=False),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("body", LONG_TEXT, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("available_at", UTCDateTime(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("lease_until", UTCDateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("operator_events_pkey")),
        sa.CheckConstraint("attempts >= 0", name=op.f("operator_events_attempts_check")),
        **_MYSQL_TABLE,
    )
    op.create_index("ix_operator_events_available_at", "operator_events", ["available_at"])


def downgrade() -> None:
    # What a circuit held back flows again: an open or disabled circuit's hold goes with it.
    op.execute(
        "UPDATE flow_keys SET paused = false, backoff_until = NULL WHERE circuit IS NOT NULL"
    )
    op.drop_table("operator_events")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("events_target")
    op.drop_index("ix_attempts_endpoint", table_name="attempts")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("endpoint_id")
    op.drop_table("endpoint_events")
    op.drop_table("endpoint_secrets")
    op.drop_table("endpoints")
    with op.batch_alter_table("flow_keys") as batch:
        batch.drop_constraint(op.f("flow_keys_circuit_check"), type_="check")
        batch.drop_column("circuit_cooldown")
        batch.drop_column("circuit_opened_at")
        batch.drop_column("circuit_changed_at")
        batch.drop_column("failures_in_a_row")
        batch.drop_column("circuit")
