"""Schedule completion: a schedule with nothing left pending is done, once what finished
its last occurrence commits (a settle, a claim, a cancel, a replay).

Invariant: a one-shot schedule ends completed, or failed if its firing was dead-lettered
(a replay that later delivers it turns failed into completed); a recurring one ends
completed once its bounds are spent and nothing is pending. Each change has its event, in
the same transaction. The statements are named SQL (`Dialect.finish_schedules`): the
schedules a finish changes are read and locked under its guard, then changed by key, so
that every database knows which rows changed and gives each its event (MySQL too, with no
UPDATE ... RETURNING); under READ COMMITTED the update by key applies what the locked read
decided, rather than a second look at the guard that could see another transaction's
commit and disagree with the events.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.schedule import SYSTEM_ACTOR
from app.store.dialects import dialect_of
from app.store.loop.sql import Finished


async def finish_one_shots(
    conn: AsyncConnection,
    schedule_ids: Iterable[uuid.UUID],
    now: datetime,
    actor: str | None = SYSTEM_ACTOR,
) -> None:
    """A one-shot schedule with nothing left pending is completed, or failed if its firing
    was dead-lettered. A replay that later delivers it turns failed into completed. Each
    schedule that changes gets its `completed` or `failed` event, by `actor`."""
    ids = list(schedule_ids)
    if ids:
        await dialect_of(conn).finish_schedules(conn, Finished.ONE_SHOTS, ids, now, actor)


async def finish_recurring(
    conn: AsyncConnection,
    schedule_ids: Iterable[uuid.UUID],
    now: datetime,
    actor: str | None = SYSTEM_ACTOR,
) -> None:
    """A recurring schedule whose bounds are spent and that has nothing left pending is
    completed (with its `completed` event, by `actor`)."""
    ids = list(schedule_ids)
    if ids:
        await dialect_of(conn).finish_schedules(conn, Finished.RECURRING, ids, now, actor)
