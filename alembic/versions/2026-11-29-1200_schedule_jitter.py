"""Schedules spread their firings over a jitter window.

Revision ID: 0002_jitter
Revises: 0001_initial
Create Date: 2026-11-29 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from alembic import op

revision: str = "0002_jitter"
down_revision: str | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# A double everywhere: MySQL's FLOAT is single precision.
DOUBLE = sa.Float().with_variant(mysql.DOUBLE(), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("jitter_seconds", DOUBLE, server_default="0", nullable=False))
        batch.create_check_constraint("schedules_jitter_seconds_check", "jitter_seconds >= 0")


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_constraint("schedules_jitter_seconds_check", type_="check")
        batch.drop_column("jitter_seconds")
