"""Flow keys: an index of each key's pending rows in due order, for a fifo key's head.

A fifo key starts only its head, the earliest pending occurrence by fire instant and then
id (a retrying head is not due, and holds the key); this index finds it without reading
the rest of the key's backlog.

Revision ID: 0011_flow_order
Revises: 0010_flow_keys
Create Date: 2026-12-03 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0011_flow_order"
down_revision: str | None = "0010_flow_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEYED = "status = 'pending' AND flow_key IS NOT NULL"


def upgrade() -> None:
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        op.create_index(
            "ix_occurrences_flow_order",
            "occurrences",
            ["status", "flow_key", "fire_at", "occurrence_id"],
        )
        return
    op.create_index(
        "ix_occurrences_flow_order",
        "occurrences",
        ["flow_key", "fire_at", "occurrence_id"],
        postgresql_where=sa.text(KEYED),
        sqlite_where=sa.text(KEYED),
    )


def downgrade() -> None:
    op.drop_index("ix_occurrences_flow_order", table_name="occurrences")
