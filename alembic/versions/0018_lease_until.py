"""Leases: each occurrence's lease end in a column of its own (`occurrences.lease_until`),
which only the claim writes, and an index of each flow key's leased rows by it.

A key's attempts in flight were counted from `available_at`, which a pause clears and a
cancel takes out of the pending rows while the attempt still runs: its slot was freed
early. The lease's end now stays as the claim wrote it until the settle or the release
ends the lease (clearing the token). Leases taken before this revision have their end
copied from `available_at`.

Revision ID: 0018_lease_until
Revises: 0017_traces
Create Date: 2026-12-05 23:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from alembic import op

revision: str = "0018_lease_until"
down_revision: str | None = "0017_traces"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSTANT = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
FLOW_LEASED = "flow_key IS NOT NULL AND lease_token IS NOT NULL"


def upgrade() -> None:
    # A nullable column with no default: no server rewrites the table to add it.
    with op.batch_alter_table("occurrences") as batch:
        batch.add_column(sa.Column("lease_until", INSTANT, nullable=True))
    op.execute(
        "UPDATE occurrences SET lease_until = available_at"
        " WHERE status = 'pending' AND lease_token IS NOT NULL"
    )
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        op.create_index("ix_occurrences_flow_leases", "occurrences", ["flow_key", "lease_until"])
        return
    op.create_index(
        "ix_occurrences_flow_leases",
        "occurrences",
        ["flow_key", "lease_until"],
        postgresql_where=sa.text(FLOW_LEASED),
        sqlite_where=sa.text(FLOW_LEASED),
    )


def downgrade() -> None:
    op.drop_index("ix_occurrences_flow_leases", table_name="occurrences")
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_column("lease_until")
