"""Destinations: where each schedule's target delivers (`schedules.destination`, a
webhook's origin or `amqp:<exchange>`, `app.domain.destinations`), so that a claim can
pass over the rows of a destination its replica has no room for.

Live schedules (pending or paused) are given theirs here, in batches by id; ended ones
never deliver again and keep NULL, which no claim passes over.

Revision ID: 0019_destinations
Revises: 0018_lease_until
Create Date: 2026-12-06 13:00:00
"""

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from alembic import op
from app.domain.destinations import MAX_DESTINATION, webhook_destination
from app.store.schema.types import UUID, JSONType

revision: str = "0019_destinations"
down_revision: str | None = "0018_lease_until"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 2000
_schedules = sa.table(
    "schedules",
    sa.column("id", UUID),
    sa.column("status", sa.String()),
    sa.column("target", JSONType),
    sa.column("destination", sa.String()),
)


def _destination(stored: Any) -> str | None:
    target = json.loads(stored) if isinstance(stored, str | bytes) else stored
    if not isinstance(target, dict):
        return None
    if target.get("type") == "rabbitmq":
        return f"amqp:{target.get('exchange', '')}"[:MAX_DESTINATION]
    url = target.get("url")
    return webhook_destination(url) if isinstance(url, str) else None


def upgrade() -> None:
    # A nullable column with no default: no server rewrites the table to add it.
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("destination", sa.String(MAX_DESTINATION), nullable=True))
    bind = op.get_bind()
    live = _schedules.c.status.in_(("pending", "paused"))
    after = None
    while True:
        chosen = sa.select(_schedules.c.id, _schedules.c.target).where(live)
        if after is not None:
            chosen = chosen.where(_schedules.c.id > after)
        rows = bind.execute(chosen.order_by(_schedules.c.id).limit(BATCH)).all()
        if not rows:
            return
        named = [
            {"b_id": row.id, "b_destination": destination}
            for row in rows
            if (destination := _destination(row.target)) is not None
        ]
        if named:
            bind.execute(
                _schedules.update()
                .where(_schedules.c.id == sa.bindparam("b_id"))
                .values(destination=sa.bindparam("b_destination")),
                named,
            )
        after = rows[-1].id


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("destination")
