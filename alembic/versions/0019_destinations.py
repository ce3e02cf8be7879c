"""Destinations: where each schedule's target delivers (`schedules.destination`, a
webhook's origin or `amqp:<exchange>`, `app.domain.destinations`), so that a claim can
pass over the rows of a destination its replica has no room for.

Live schedules (pending or paused) are given theirs here: in one statement on PostgreSQL
and MySQL/MariaDB (so `chronoq migrate --sql` prints it too), which computes what
`webhook_destination` does; on SQLite by that function, in batches by id. Ended schedules
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

LIVE = "status IN ('pending', 'paused')"
# The origin of a webhook's URL (`webhook_destination`): its scheme and `://`, then what
# follows up to the path, the query or the fragment, from after the last `@`, in lower case.
_POSTGRESQL = rf"""
UPDATE schedules SET destination = CASE
    WHEN target_type = 'rabbitmq'
        THEN left('amqp:' || coalesce(target->>'exchange', ''), {MAX_DESTINATION})
    WHEN position('://' in target->>'url') = 0
        THEN left(lower(target->>'url'), {MAX_DESTINATION})
    ELSE left(lower(
        split_part(target->>'url', '://', 1) || '://' || regexp_replace(
            substring(substr(target->>'url', position('://' in target->>'url') + 3)
                      from '^[^/?#]*'),
            '^.*@', '')
    ), {MAX_DESTINATION})
END
WHERE {LIVE}
"""
_URL = "JSON_UNQUOTE(JSON_EXTRACT(target, '$.url'))"
_MYSQL = f"""
UPDATE schedules SET destination = CASE
    WHEN target_type = 'rabbitmq'
        THEN LEFT(CONCAT('amqp:', COALESCE(JSON_UNQUOTE(JSON_EXTRACT(target, '$.exchange')),
                                           '')), {MAX_DESTINATION})
    WHEN LOCATE('://', {_URL}) = 0
        THEN LEFT(LOWER({_URL}), {MAX_DESTINATION})
    ELSE LEFT(LOWER(CONCAT(
        SUBSTRING_INDEX({_URL}, '://', 1), '://',
        SUBSTRING_INDEX(
            REGEXP_SUBSTR(SUBSTRING({_URL}, LOCATE('://', {_URL}) + 3), '^[^/?#]*'), '@', -1)
    )), {MAX_DESTINATION})
END
WHERE {LIVE}
"""
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


def _by_batches() -> None:
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


def upgrade() -> None:
    # A nullable column with no default: no server rewrites the table to add it.
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("destination", sa.String(MAX_DESTINATION), nullable=True))
    dialect = op.get_context().dialect.name
    if dialect == "postgresql":
        op.execute(_POSTGRESQL)
    elif dialect in ("mysql", "mariadb"):
        op.execute(_MYSQL)
    else:
        _by_batches()


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("destination")
