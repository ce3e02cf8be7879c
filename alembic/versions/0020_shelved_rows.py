"""Shelved rows: a paused or backing-off flow key shelves its waiting occurrences, which
leave the keyed claim's index (`occurrences.shelved`), so that however many keys hold work
back the claim never visits them; `flow_keys.shelving` marks a key with rows shelved, and an
index of those that may start again lets the claim unshelve theirs when a back-off ends.

`ix_occurrences_flow` (PostgreSQL and SQLite) now leaves shelved rows out, and
`ix_occurrences_flow_open` lists the rows no key shelved in due order, from which the keyed
claim finds the keys with work due (however many have only future rows). No row is shelved
at this revision: the claim shelves them as it finds them.

Revision ID: 0020_shelved_rows
Revises: 0019_destinations
Create Date: 2026-12-06 13:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0020_shelved_rows"
down_revision: str | None = "0019_destinations"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEYED = "status = 'pending' AND flow_key IS NOT NULL"
KEYED_OPEN = KEYED + " AND NOT shelved"
UNSHELVING = "shelving AND NOT paused"


def _partial(name: str, table: str, columns: list[str], where: str) -> None:
    """An index of the rows `where` selects (PostgreSQL and SQLite)."""
    op.create_index(
        name, table, columns, postgresql_where=sa.text(where), sqlite_where=sa.text(where)
    )


def upgrade() -> None:
    # Columns with a constant default: no server rewrites the table to add them.
    with op.batch_alter_table("occurrences") as batch:
        batch.add_column(
            sa.Column("shelved", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    with op.batch_alter_table("flow_keys") as batch:
        batch.add_column(
            sa.Column("shelving", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        op.create_index(
            "ix_flow_keys_unshelving", "flow_keys", ["shelving", "paused", "backoff_until"]
        )
        return
    op.drop_index("ix_occurrences_flow", table_name="occurrences")
    _partial("ix_occurrences_flow", "occurrences", ["flow_key", "available_at"], KEYED_OPEN)
    _partial("ix_occurrences_flow_open", "occurrences", ["available_at", "flow_key"], KEYED_OPEN)
    _partial("ix_flow_keys_unshelving", "flow_keys", ["backoff_until"], UNSHELVING)


def downgrade() -> None:
    op.drop_index("ix_flow_keys_unshelving", table_name="flow_keys")
    if op.get_context().dialect.name not in ("mysql", "mariadb"):
        op.drop_index("ix_occurrences_flow_open", table_name="occurrences")
        op.drop_index("ix_occurrences_flow", table_name="occurrences")
        _partial("ix_occurrences_flow", "occurrences", ["flow_key", "available_at"], KEYED)
    with op.batch_alter_table("flow_keys") as batch:
        batch.drop_column("shelving")
    with op.batch_alter_table("occurrences") as batch:
        batch.drop_column("shelved")
