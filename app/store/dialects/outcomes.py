"""What a settle writes beyond each occurrence's own row, as every database can write it:
the statements behind `Dialect.mark_delivered` and `Dialect.finish_schedules`.

They are built once per dialect from its clock (`Dialect.now`) and list parameters
(`Dialect.among`). PostgreSQL overrides both operations with single statements over these
same pieces (data-modifying CTEs, in postgresql.py); the meaning is the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from app.domain.occurrence import OccurrenceStatus, Origin
from app.store.schema.tables import by_key, occurrences, schedules
from app.store.schema.types import UUID


@dataclass(frozen=True, slots=True)
class Outcomes:
    # The occurrences of `ids` that lease `token` still holds, delivered.
    delivered: sa.Update
    # Each schedule of `touched` that delivered one of `delivered_ids` at `now` (this
    # transaction) and counts dead letters in a row: back to 0.
    restart_failures: sa.Update
    # The schedules of `schedule_ids` set to `b_status`.
    finish: sa.Update


def delivered_values(now: sa.ColumnElement[Any]) -> dict[str, Any]:
    """What a delivered occurrence's row becomes, delivered at `now`."""
    return {
        "status": OccurrenceStatus.DELIVERED,
        "delivered_at": now,
        "available_at": None,
        "updated_at": now,
        "lease_token": None,
        "last_error": None,
    }


# `column IN (the list parameter called name)`, as the dialect writes one (`Dialect.among`).
Among = Callable[[sa.ColumnElement[Any], str], sa.ColumnElement[bool]]


def outcomes(now: sa.ColumnElement[Any], among: Among) -> Outcomes:
    """The statements on a dialect's clock, `now`, and its list parameters, `among`."""
    o = occurrences.alias("o")
    return Outcomes(
        delivered=occurrences.update()
        .where(
            among(occurrences.c.occurrence_id, "ids"),
            occurrences.c.lease_token == sa.bindparam("token", type_=UUID),
            by_key(occurrences.c.status) == OccurrenceStatus.PENDING,
        )
        .values(**delivered_values(now)),
        restart_failures=schedules.update()
        .where(
            among(schedules.c.id, "touched"),
            schedules.c.consecutive_failures > 0,
            sa.exists().where(
                o.c.schedule_id == schedules.c.id,
                among(o.c.occurrence_id, "delivered_ids"),
                o.c.status == OccurrenceStatus.DELIVERED,
                o.c.delivered_at == now,
                o.c.origin != Origin.CALLBACK,  # no delivery of its schedule's
            ),
        )
        .values(consecutive_failures=0),
        finish=schedules.update()
        .where(among(schedules.c.id, "schedule_ids"))
        .values(status=sa.bindparam("b_status", type_=sa.String()), updated_at=now),
    )
