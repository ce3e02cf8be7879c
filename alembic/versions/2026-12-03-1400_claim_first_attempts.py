"""The unkeyed claim index in two: first attempts, and rows attempted before.

`ix_occurrences_claim` becomes partial on pending unkeyed rows never attempted
(`first_attempt_at IS NULL`), and `ix_occurrences_claim_again` holds those attempted before
(retries, replays, leases lost), so that the claim takes first attempts first and a bulk
replay never stands in front of them. MySQL keeps its status-led claim index: the kind of
attempt is a filter there.

Revision ID: 0013_claim_first_attempts
Revises: 0012_schedule_retry
Create Date: 2026-12-03 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0013_claim_first_attempts"
down_revision: str | None = "0012_schedule_retry"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UNKEYED = "status = 'pending' AND flow_key IS NULL"
FRESH = f"{UNKEYED} AND first_attempt_at IS NULL"
AGAIN = f"{UNKEYED} AND first_attempt_at IS NOT NULL"


def _mysql() -> bool:
    return op.get_context().dialect.name in ("mysql", "mariadb")


def _partial(name: str, where: str) -> None:
    op.create_index(
        name,
        "occurrences",
        ["available_at"],
        postgresql_where=sa.text(where),
        sqlite_where=sa.text(where),
    )


def upgrade() -> None:
    if _mysql():
        return
    op.drop_index("ix_occurrences_claim", table_name="occurrences")
    _partial("ix_occurrences_claim", FRESH)
    _partial("ix_occurrences_claim_again", AGAIN)


def downgrade() -> None:
    if _mysql():
        return
    op.drop_index("ix_occurrences_claim_again", table_name="occurrences")
    op.drop_index("ix_occurrences_claim", table_name="occurrences")
    _partial("ix_occurrences_claim", UNKEYED)
