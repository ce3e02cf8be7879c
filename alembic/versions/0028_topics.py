"""Topics and fan-out: `topics`, `subscriptions` (an endpoint's, with what it matches),
and on `occurrences` a fan-out's deliveries (origin `fanout`, with `parent_id`, the topic's
occurrence, and `subscription_id`) and the status `completed` of an occurrence that fanned
out, which retention prunes as it prunes delivered ones. On PostgreSQL the checks are
added NOT VALID, then validated without blocking writes.

Revision ID: 0028_topics
Revises: 0027_endpoints
Create Date: 2026-12-09 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from app.store.schema.types import UUID, JSONType, UTCDateTime

revision: str = "0028_topics"
down_revision: str | None = "0027_endpoints"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MYSQL_TABLE = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}
OLD_ORIGINS = "origin IN ('schedule', 'trigger', 'catchup', 'backfill', 'callback')"
NEW_ORIGINS = "origin IN ('schedule', 'trigger', 'catchup', 'backfill', 'callback', 'fanout')"
OLD_STATUSES = "status IN ('pending', 'delivered', 'dead_lettered', 'cancelled', 'skipped')"
NEW_STATUSES = (
    "status IN ('pending', 'delivered', 'dead_lettered', 'cancelled', 'skipped', 'completed')"
)
OLD_PRUNABLE = "status IN ('delivered', 'cancelled', 'skipped')"
NEW_PRUNABLE = "status IN ('delivered', 'cancelled', 'skipped', 'completed')"
CHECKS = {
    "occurrences_origin_check": (OLD_ORIGINS, NEW_ORIGINS),
    "occurrences_status_check": (OLD_STATUSES, NEW_STATUSES),
}


def _dialect() -> str:
    return op.get_context().dialect.name


def _replace_checks(new: bool) -> None:
    """The occurrences' origin and status checks, to their new (or old) sets."""
    dialect = _dialect()
    if dialect == "postgresql":
        for name, (old, fresh) in CHECKS.items():
            op.execute(f"ALTER TABLE occurrences DROP CONSTRAINT {name}")
            op.execute(
                f"ALTER TABLE occurrences ADD CONSTRAINT {name} CHECK ({fresh if new else old})"
                " NOT VALID"
            )
            op.execute(f"ALTER TABLE occurrences VALIDATE CONSTRAINT {name}")
        return
    if dialect in ("mysql", "mariadb"):
        for name, (old, fresh) in CHECKS.items():
            # MySQL 8 and MariaDB both take DROP CONSTRAINT (MariaDB has no DROP CHECK).
            op.execute(f"ALTER TABLE occurrences DROP CONSTRAINT {name}")
            op.execute(
                f"ALTER TABLE occurrences ADD CONSTRAINT {name} CHECK ({fresh if new else old})"
            )
        return
    with op.batch_alter_table("occurrences") as batch:
        for name, (old, fresh) in CHECKS.items():
            batch.drop_constraint(op.f(name), type_="check")
            batch.create_check_constraint(op.f(name), fresh if new else old)


def upgrade() -> None:
    op.create_table(
        "topics",
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("description", sa.String(1000), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "name", name=op.f("topics_pkey")),
        sa.CheckConstraint("version >= 1", name=op.f("topics_version_check")),
        **_MYSQL_TABLE,
    )
    op.create_table(
        "subscriptions",
        sa.Column("id", UUID, nullable=False),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("topic", sa.String(128), nullable=False),
        sa.Column("endpoint_id", UUID, nullable=False),
        sa.Column("event_types", JSONType, nullable=True),
        sa.Column("match", JSONType, nullable=True),
        sa.Column("version", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("subscriptions_pkey")),
        sa.CheckConstraint("version >= 1", name=op.f("subscriptions_version_check")),
        **_MYSQL_TABLE,
    )
    op.create_index("ix_subscriptions_tenant_topic", "subscriptions", ["tenant", "topic"])
    op.create_index("ix_subscriptions_endpoint_id", "subscriptions", ["endpoint_id"])
    with op.batch_alter_table("occurrences") as batch:
        batch.add_column(sa.Column("parent_id", UUID, nullable=True))
        batch.add_column(sa.Column("subscription_id", UUID, nullable=True))
    if _dialect() in ("mysql", "mariadb"):
        op.create_index("ix_occurrences_parent", "occurrences", ["parent_id"])
    else:
        op.create_index(
            "ix_occurrences_parent",
            "occurrences",
            ["parent_id"],
            postgresql_where=sa.text("parent_id IS NOT NULL"),
            sqlite_where=sa.text("parent_id IS NOT NULL"),
        )
    _replace_checks(new=True)
    _retention_index(NEW_PRUNABLE)


def _retention_index(prunable: str) -> None:
    """Retention's index of finished occurrences, with `prunable` (a completed topic
    occurrence is finished too). MySQL's has no predicate: it stays."""
    if _dialect() in ("mysql", "mariadb"):
        return
    op.drop_index("ix_occurrences_retention", table_name="occurrences")
    op.create_index(
        "ix_occurrences_retention",
        "occurrences",
        ["updated_at"],
        postgresql_where=sa.text(prunable),
        sqlite_where=sa.text(prunable),
    )


def downgrade() -> None:
    # A fan-out's deliveries go (their topic's occurrence stays, as it ended); an occurrence
    # that fanned out reads as delivered, its nearest state before topics.
    op.execute("DELETE FROM occurrences WHERE origin = 'fanout'")
    op.execute(
        "UPDATE occurrences SET status = 'delivered', delivered_at = updated_at"
        " WHERE status = 'completed'"
    )
    _retention_index(OLD_PRUNABLE)
    _replace_checks(new=False)
    op.drop_index("ix_occurrences_parent", table_name="occurrences")
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_column("subscription_id")
        batch.drop_column("parent_id")
    op.drop_table("subscriptions")
    op.drop_table("topics")
